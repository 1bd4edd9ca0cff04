package integration

// Resume classes of the initial copy (issue 28, items 4, 6 and 7), each
// through real servers: a copy is run in this process up to its last
// chunk but not handed off, the source is changed as it may be while
// sluice is down, and a second run resumes it with a new snapshot, as a
// restart after kill -9 does. The target must then equal the source,
// judged by dbtest.CompareTables.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/apply/mysql"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/apply/typemap"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// copyRig runs a stream's initial copy in this process, with the source
// and target sync start would use, without the hand-off: the next run
// resumes it.
type copyRig struct {
	id       string
	src, dst *endpoint
	tables   []string
	// chunkRows splits the tables into chunks of this many rows.
	chunkRows int
	// noReplicaRole runs a PostgreSQL target without
	// session_replication_role = replica, as one whose user may not set it.
	noReplicaRole bool
}

func newCopyRig(id string, src, dst *endpoint, chunkRows int, tables ...string) *copyRig {
	return &copyRig{id: id, src: src, dst: dst, tables: tables, chunkRows: chunkRows}
}

func (r *copyRig) names(t *testing.T) []sluice.TableName {
	names := tableNames(t, r.tables)
	for i := range names {
		if r.src.engine == daemon.EnginePostgres && names[i].Schema == "" {
			names[i].Schema = "public"
		}
	}
	return names
}

// source is the copy's source: the binlog's on MariaDB, the trigger
// source's on PostgreSQL (its snapshot is a plain exported one: a
// replication slot would wait for every transaction running on the shared
// server to end, the other tests' included).
func (r *copyRig) source(t *testing.T) tablecopy.Source {
	if r.src.engine == daemon.EnginePostgres {
		return pgtrigger.NewCopySource(r.src.url, pgtrigger.Config{Stream: r.id, Tables: r.names(t), Install: true})
	}
	return binlog.NewCopySource(r.src.url, binlog.Config{Tables: r.names(t)})
}

// target opens the target as sync start does: wrapped in the type map
// across engines and between MySQL-family servers.
func (r *copyRig) target(ctx context.Context) (tablecopy.Target, error) {
	var inner typemap.Inner
	if r.dst.engine == daemon.EnginePostgres {
		tg, err := postgres.Open(ctx, r.dst.url, postgres.Config{NoReplicaRole: r.noReplicaRole})
		if err != nil {
			return nil, err
		}
		if r.src.engine == daemon.EnginePostgres {
			return tg, nil
		}
		inner = tg
	} else {
		tg, err := mysql.Open(ctx, r.dst.url, mysql.Config{})
		if err != nil {
			return nil, err
		}
		inner = tg
	}
	return typemap.Wrap(inner, typemap.Engine(r.src.engine), typemap.Engine(r.dst.engine)), nil
}

// run copies (or resumes the copy) and returns its result or error.
func (r *copyRig) run(t *testing.T) (tablecopy.Result, error) {
	t.Helper()
	ctx := context.Background()
	return tablecopy.Run(ctx, tablecopy.Config{
		Stream:    r.id,
		Tables:    r.names(t),
		Source:    r.source(t),
		NewTarget: r.target,
		Workers:   2,
		ChunkRows: r.chunkRows,
		Digests:   r.src.engine == r.dst.engine,
	})
}

func (r *copyRig) mustRun(t *testing.T) tablecopy.Result {
	t.Helper()
	res, err := r.run(t)
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	return res
}

// compare fails the test unless the target's tables equal the source's.
func (r *copyRig) compare(t *testing.T, when string) {
	t.Helper()
	_, srcCmp := workloadDB(r.src)
	_, dstCmp := workloadDB(r.dst)
	diffs, err := dbtest.CompareTables(context.Background(), srcCmp, dstCmp, r.tables...)
	if err != nil {
		t.Fatal(err)
	}
	if !diffs.Equal() {
		t.Errorf("%s: the target differs from the source:\n%s", when, diffs)
	}
}

func execAll(t *testing.T, e *endpoint, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if err := e.exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %s: %v", e.engine, q, err)
		}
	}
}

// TestCopyResumeSeesFloatChange (item 4): a resumed MariaDB → MariaDB
// copy keeps a done chunk whose digests match the new snapshot's. A FLOAT
// prints 6 significant digits, so a digest of its text would miss a
// change past them (12345.67 → 12345.68 both print 12345.7), keep the
// chunk, and the stream, starting after the change, would never bring it.
func TestCopyResumeSeesFloatChange(t *testing.T) {
	t.Parallel()
	src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EngineMySQL)
	ddl := "CREATE TABLE prices (id int PRIMARY KEY, price float NOT NULL, note varchar(20))"
	execAll(t, src, ddl, "INSERT INTO prices SELECT seq, 12345.67, 'n' FROM seq_1_to_40")
	execAll(t, dst, ddl)
	r := newCopyRig("resumefloat", src, dst, 10, "prices")
	first := r.mustRun(t)
	execAll(t, src, "UPDATE prices SET price = 12345.68 WHERE id = 5")
	res := r.mustRun(t)
	if res.Epoch != 2 || res.Kept != first.Chunks-1 || res.Recopied != 1 {
		t.Errorf("resume: epoch %d, %d chunks kept, %d copied again; want epoch 2, %d kept and the changed one copied again", res.Epoch, res.Kept, res.Recopied, first.Chunks-1)
	}
	r.compare(t, "after the resume")
	if err := dbtest.CompareChecksumTable(context.Background(), src.my, dst.my, "prices"); err != nil {
		t.Error(err)
	}
}

// TestCopyResumeKeyTypeDiffers (item 6): a MariaDB int key copied into a
// PostgreSQL text key (the type map allows it). Across engines a resume
// copies every done chunk again, first deleting its range on the target;
// there the range's bounds compare as text ('2' is past '11'), so the
// delete of one chunk takes rows of others already copied again.
func TestCopyResumeKeyTypeDiffers(t *testing.T) {
	t.Parallel()
	src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, daemon.EnginePostgres)
	execAll(t, src, "CREATE TABLE accounts (id int PRIMARY KEY, name varchar(20) NOT NULL)",
		"INSERT INTO accounts SELECT seq, CONCAT('a', seq) FROM seq_1_to_100")
	execAll(t, dst, "CREATE TABLE accounts (id text PRIMARY KEY, name varchar(20) NOT NULL)")
	r := newCopyRig("resumekeytype", src, dst, 10, "accounts")
	// dbtest.CompareTables does not compare a number with text: the rows
	// are compared as the text both servers print for an integer and a
	// varchar, which is exact for them.
	compare := func(when string) {
		ctx := context.Background()
		want, err := src.textRows(ctx, "SELECT CAST(id AS CHAR), name FROM accounts")
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.textRows(ctx, "SELECT id, name FROM accounts")
		if err != nil {
			t.Fatal(err)
		}
		if missing, extra := diffSets(want, got); len(missing)+len(extra) > 0 {
			t.Errorf("%s: the target lacks %d source rows %v and has %d others %v", when, len(missing), missing, len(extra), extra)
		}
	}
	r.mustRun(t)
	compare("after the first copy")
	execAll(t, src, "UPDATE accounts SET name = 'changed' WHERE id = 50")
	r.mustRun(t)
	compare("after the resume")
}

// textRows reads a query's rows as text, each row's columns joined by |.
func (e *endpoint) textRows(ctx context.Context, q string) ([]string, error) {
	var out []string
	if e.pg != nil {
		rows, err := e.pg.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(vals))
			for i, v := range vals {
				parts[i] = fmt.Sprint(v)
			}
			out = append(out, strings.Join(parts, "|"))
		}
		return out, rows.Err()
	}
	rows, err := e.my.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = v.String
		}
		out = append(out, strings.Join(parts, "|"))
	}
	return out, rows.Err()
}

// diffSets returns the strings of want not in got, and of got not in want.
func diffSets(want, got []string) (missing, extra []string) {
	in := map[string]int{}
	for _, s := range got {
		in[s]++
	}
	for _, s := range want {
		if in[s] > 0 {
			in[s]--
			continue
		}
		missing = append(missing, s)
	}
	for s, n := range in {
		for ; n > 0; n-- {
			extra = append(extra, s)
		}
	}
	slices.Sort(extra)
	return missing, extra
}

// fkSchema is a parent and a child that references it with ON DELETE
// CASCADE, as the user made them on both sides: the tables, then the
// foreign key.
func fkSchema(e daemon.Engine) (tables []string, fk string) {
	child := "CREATE TABLE fk_lines (id int PRIMARY KEY, order_id int NOT NULL, qty int NOT NULL)"
	if e == daemon.EngineMySQL {
		child = "CREATE TABLE fk_lines (id int PRIMARY KEY, order_id int NOT NULL, qty int NOT NULL, KEY (order_id))"
	}
	return []string{"CREATE TABLE fk_orders (id int PRIMARY KEY, note varchar(20) NOT NULL)", child},
		"ALTER TABLE fk_lines ADD CONSTRAINT fk_lines_order FOREIGN KEY (order_id) REFERENCES fk_orders (id) ON DELETE CASCADE ON UPDATE CASCADE"
}

// TestCopyResumeFKCascade (item 7): a resumed copy writes a changed parent
// chunk again, first deleting its range on the target. Were the target's
// ON DELETE CASCADE to fire, it would delete the children of that chunk's
// parents, which sit in child chunks the resume kept (their rows did not
// change; the child table is the larger, so its chunks are checked first),
// and nothing would bring them back. The copy writes as the stream does,
// with the target's foreign-key actions off: PostgreSQL under
// session_replication_role = replica, MariaDB with foreign_key_checks = 0
// (where InnoDB runs no cascade either).
//
// A PostgreSQL target whose user may not set session_replication_role
// cannot turn them off (nor copy children before their parents: there the
// foreign key is added after the first run, which a copy in the other
// order could not get through). The resume then refuses to copy the
// parent's chunk again, naming the constraint and the fix; without the
// refusal it keeps the child chunks, and the cascade deletes the 30
// children of the changed chunk's parents.
func TestCopyResumeFKCascade(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		engine    daemon.Engine
		noReplica bool
	}{{daemon.EnginePostgres, false}, {daemon.EnginePostgres, true}, {daemon.EngineMySQL, false}} {
		e := c.engine
		name := string(e)
		if c.noReplica {
			name += "_without_replica_role"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, dst := newEndpoint(t, e), newEndpoint(t, e)
			fill := []string{"INSERT INTO fk_orders SELECT g, 'o' FROM generate_series(1, 40) g",
				"INSERT INTO fk_lines SELECT g, 1 + (g - 1) / 3, g FROM generate_series(1, 120) g"}
			if e == daemon.EngineMySQL {
				fill = []string{"INSERT INTO fk_orders SELECT seq, 'o' FROM seq_1_to_40",
					"INSERT INTO fk_lines SELECT seq, 1 + (seq - 1) DIV 3, seq FROM seq_1_to_120"}
			}
			tables, fk := fkSchema(e)
			execAll(t, src, append(append(tables, fk), fill...)...)
			execAll(t, dst, tables...)
			if !c.noReplica {
				execAll(t, dst, fk)
			}
			r := newCopyRig("resumefk"+name[:2]+strconv.FormatBool(c.noReplica)[:1], src, dst, 10, "fk_orders", "fk_lines")
			r.noReplicaRole = c.noReplica
			r.mustRun(t)
			if c.noReplica {
				execAll(t, dst, fk)
			}
			execAll(t, src, "UPDATE fk_orders SET note = 'changed' WHERE id = 2")
			if c.noReplica {
				_, err := r.run(t)
				if err == nil || !strings.Contains(err.Error(), "ON DELETE CASCADE of foreign key fk_lines_order on table fk_lines") {
					r.compare(t, "after the resume")
					t.Fatalf("resume without session_replication_role: %v, want a refusal naming fk_lines_order", err)
				}
				t.Logf("%v", err)
				return
			}
			res := r.mustRun(t)
			if res.Recopied != 1 {
				t.Errorf("resume copied %d chunks again, want 1 (the changed parent's)", res.Recopied)
			}
			r.compare(t, "after the resume")
		})
	}
}

// TestCopyFencedByNewerProcess (item 8, through sync start's own wiring):
// the copy's workers check every chunk against the generation the stream's
// process took on the target, as its batches are checked. Once another
// process takes the stream (here: the fence row bumped by hand while the
// copy runs), this one's next chunk commits nothing and the stream stops
// with apply.ErrFenced, which sluice exits on without a restart (code 5).
func TestCopyFencedByNewerProcess(t *testing.T) {
	t.Parallel()
	for _, to := range []daemon.Engine{daemon.EnginePostgres, daemon.EngineMySQL} {
		t.Run(string(to), func(t *testing.T) {
			t.Parallel()
			src, dst := newEndpoint(t, daemon.EngineMySQL), newEndpoint(t, to)
			execAll(t, src, "CREATE TABLE fenced (id int PRIMARY KEY, v varchar(20) NOT NULL)", "INSERT INTO fenced SELECT seq, 'v' FROM seq_1_to_2000")
			execAll(t, dst, "CREATE TABLE fenced (id int PRIMARY KEY, v varchar(20) NOT NULL)")
			dstURL, _ := dst.viaProxy(t, 20*time.Millisecond) // 40 ms a chunk: the copy takes seconds
			id := "copyfence" + string(to[:2])
			run := startStream(t, daemon.StreamOptions{
				ID: id, SourceURL: src.url, TargetURL: dstURL, Tables: tableNames(t, []string{"fenced"}), StateDir: t.TempDir(),
				SourceMode: daemon.ModeBinlog, KillBudget: 5 * time.Second, CopyWorkers: 2, CopyChunkRows: 20,
			})
			deadline := time.Now().Add(60 * time.Second)
			for countDone(t, dst, id) < 2 {
				if time.Now().After(deadline) {
					t.Fatal("the copy wrote no chunks within 60 s")
				}
				time.Sleep(20 * time.Millisecond) // polling interval
			}
			bump := "UPDATE sluice.fence SET generation = generation + 1 WHERE stream = '" + id + "'"
			if to == daemon.EngineMySQL {
				bump = "UPDATE sluice_fence SET generation = generation + 1 WHERE stream = '" + id + "'"
			}
			execAll(t, dst, bump)
			doneAtBump := countDone(t, dst, id)
			var err error
			select {
			case err = <-run.done:
				run.done <- err
			case <-time.After(60 * time.Second):
				t.Fatal("the stream did not stop within 60 s of a newer generation")
			}
			if !errors.Is(err, apply.ErrFenced) || daemon.ExitCode(err) != daemon.ExitState {
				t.Fatalf("stream stopped with %v (exit %d), want apply.ErrFenced (exit %d)", err, daemon.ExitCode(err), daemon.ExitState)
			}
			// Chunks in flight at the bump held the fence row and committed
			// first; none began after it.
			if n := countDone(t, dst, id); n > doneAtBump+2 {
				t.Errorf("%d chunks done after the bump, %d at it: more than the 2 workers had in flight", n, doneAtBump)
			}
			t.Logf("%v", err)
		})
	}
}
