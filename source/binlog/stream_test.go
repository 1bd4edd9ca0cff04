package binlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestXAStops: an XA transaction is binlogged at XA PREPARE with its rows
// and decided later; the reader must stop with a named error before any of
// its rows, so an XA ROLLBACK cannot leave them applied. XA transactions
// of other tables, and MariaDB's one-phase XA COMMIT (an ordinary
// transaction in its binlog), are followed.
func TestXAStops(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE other (id INT PRIMARY KEY)")
	for _, filePos := range []bool{false, true} {
		dbtest.ExecSQL(t, db, "DELETE FROM a", "DELETE FROM other")
		r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos}, sluice.Position{})
		xid := fmt.Sprintf("sluice-xa-%v", filePos)
		// A single connection: XA's statements are one session's.
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"INSERT INTO a VALUES (1, 'before')",
			"XA START 'other-" + xid + "'", "INSERT INTO other VALUES (1)", "XA END 'other-" + xid + "'", "XA PREPARE 'other-" + xid + "'", "XA COMMIT 'other-" + xid + "'",
			"XA START 'one-" + xid + "'", "INSERT INTO a VALUES (2, 'one phase')", "XA END 'one-" + xid + "'", "XA COMMIT 'one-" + xid + "' ONE PHASE",
			"XA START '" + xid + "'", "INSERT INTO a VALUES (3, 'rolled back')", "XA END '" + xid + "'", "XA PREPARE '" + xid + "'", "XA ROLLBACK '" + xid + "'",
			"INSERT INTO a VALUES (4, 'after')",
		} {
			if _, err := conn.ExecContext(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		conn.Close()
		got, err := readUntilErr(t, r)
		if summary(got) != "insert a key=[] row=[1 before]; insert a key=[] row=[2 one phase]; " {
			t.Errorf("file=%v: changes before the XA transaction: %s", filePos, summary(got))
		}
		var xe *XAError
		if !errors.As(err, &xe) || xe.Table != tn(dbn, "a") {
			t.Fatalf("file=%v: %v, want an XAError about %s.a", filePos, err, dbn)
		}
		for _, want := range []string{"'" + xid + "'", dbn + ".a", "does not follow XA transactions"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("file=%v: error lacks %q: %v", filePos, want, err)
			}
		}
		if tbl, ok := sluice.ErrTable(err); !ok || tbl != tn(dbn, "a") {
			t.Errorf("file=%v: error's table %v %v", filePos, tbl, ok)
		}
		t.Logf("file=%v: %v", filePos, err)
		r.Close()
	}
}

// TestResumeWithOtherTableList: the position of a change inside a
// transaction names the row in the binlog, not a count of the streamed
// tables' changes, so resuming it with another table list (a restart, a
// SIGHUP reload) reads exactly the next change of the tables now streamed.
func TestResumeWithOtherTableList(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE b (id INT PRIMARY KEY, n INT)")
	for _, filePos := range []bool{false, true} {
		dbtest.ExecSQL(t, db, "DELETE FROM a", "DELETE FROM b")
		ab := Config{Tables: []sluice.TableName{tn(dbn, "a"), tn(dbn, "b")}, FilePositions: filePos}
		onlyA := Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos}
		r := open(t, d.DSN, ab, sluice.Position{})
		dbtest.ExecSQL(t, db, "BEGIN; INSERT INTO a VALUES (1,'a1'); INSERT INTO b VALUES (1,1); INSERT INTO b VALUES (2,2); "+
			"INSERT INTO a VALUES (2,'a2'),(3,'a3'); UPDATE b SET n=n+10; INSERT INTO a VALUES (4,'a4'); DELETE FROM b WHERE id=1; COMMIT",
			"INSERT INTO a VALUES (100,'next txn')")
		all := readN(t, r, 10, true)
		r.Close()
		for i := range all[:len(all)-1] {
			// With both tables: exactly the next change.
			r2 := open(t, d.DSN, ab, all[i].Pos)
			if got := readN(t, r2, 1, false)[0]; describe(got) != describe(all[i+1]) || got.Pos != all[i+1].Pos {
				t.Errorf("file=%v {a,b} from change %d (%s): read %s @%s, want %s", filePos, i, all[i].Pos, describe(got), got.Pos, describe(all[i+1]))
			}
			r2.Close()
			// With a only: the next change of a after it.
			var want sluice.Change
			for _, c := range all[i+1:] {
				if c.Table.Name.Name == "a" {
					want = c
					break
				}
			}
			r3 := open(t, d.DSN, onlyA, all[i].Pos)
			if got := readN(t, r3, 1, false)[0]; describe(got) != describe(want) || got.Pos != want.Pos {
				t.Errorf("file=%v {a} from change %d (%s, %s): read %s, want %s", filePos, i, describe(all[i]), all[i].Pos, describe(got), describe(want))
			}
			r3.Close()
		}
		// A token of an earlier version (<base>|<txn>|<k>, k counting the
		// streamed tables' changes) still resumes with the table list
		// that wrote it.
		for _, i := range []int{0, 3, 5} {
			parts := strings.Split(all[i].Pos.Token, "|")
			old := sluice.Position{Kind: Kind, Token: fmt.Sprintf("%s|%s|%d", parts[0], parts[1], i+1)}
			r4 := open(t, d.DSN, ab, old)
			if got := readN(t, r4, 1, false)[0]; describe(got) != describe(all[i+1]) {
				t.Errorf("file=%v old token %s: read %s, want %s", filePos, old, describe(got), describe(all[i+1]))
			}
			r4.Close()
		}
	}
}

// TestTruncate: TRUNCATE of a streamed table is handed out in order as an
// OpTruncate change whose position resumes after it; one of another table
// is passed over.
func TestTruncate(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE other (id INT PRIMARY KEY)")
	for _, filePos := range []bool{false, true} {
		cfg := Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos}
		r := open(t, d.DSN, cfg, sluice.Position{})
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (1,'x'),(2,'y')", "TRUNCATE a", "INSERT INTO a VALUES (3,'z')",
			"INSERT INTO other VALUES (1)", "TRUNCATE TABLE other", "TRUNCATE TABLE `"+dbn+"`.`a`", "INSERT INTO a VALUES (4,'w')")
		cs := readN(t, r, 6, true)
		want := []string{"insert a key=[] row=[1 x]", "insert a key=[] row=[2 y]", "truncate a key=[] row=[]",
			"insert a key=[] row=[3 z]", "truncate a key=[] row=[]", "insert a key=[] row=[4 w]"}
		for i, c := range cs {
			if describe(c) != want[i] {
				t.Errorf("file=%v change %d: %s, want %s", filePos, i, describe(c), want[i])
			}
		}
		if tr := cs[2]; tr.Table != r.Tables()[0] || tr.Key != nil || tr.Row != nil || tr.Time.IsZero() || strings.Contains(tr.Pos.Token, "|") {
			t.Errorf("file=%v truncate change %+v", filePos, tr)
		}
		r.Close()
		for _, i := range []int{1, 2, 4} {
			r2 := open(t, d.DSN, cfg, cs[i].Pos)
			if got := readN(t, r2, 1, false)[0]; describe(got) != want[i+1] || got.Pos != cs[i+1].Pos {
				t.Errorf("file=%v resume after change %d (%s): %s @%s, want %s @%s", filePos, i, cs[i].Pos, describe(got), got.Pos, want[i+1], cs[i+1].Pos)
			}
			r2.Close()
		}
		dbtest.ExecSQL(t, db, "DELETE FROM a", "DELETE FROM other")
	}
}

// TestProgressMarkers: while the binlog moves through other tables'
// transactions, Read hands out OpProgress markers at most once per
// interval, only when the position moved, and resuming from one reads the
// next change.
func TestProgressMarkers(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)")
	for _, filePos := range []bool{false, true} {
		const interval = 400 * time.Millisecond
		cfg := Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos, ProgressInterval: interval, HeartbeatPeriod: time.Second}
		r := open(t, d.DSN, cfg, sluice.Position{})
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (1)")
		// The row, then one marker at the boundary after its transaction:
		// a checkpoint at the row does not cover the source's position
		// after it, which a quiet source would never move past.
		var row, after *sluice.Change
		for deadline := time.Now().Add(30 * time.Second); after == nil; {
			if time.Now().After(deadline) {
				t.Fatalf("file=%v: no progress marker after the transaction's row (row %v)", filePos, row)
			}
			cs, err := r.Read(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			for i := range cs {
				switch c := &cs[i]; {
				case c.Op != sluice.OpProgress && row == nil:
					row = c
				case c.Op == sluice.OpProgress && row != nil:
					after = c
				default:
					t.Fatalf("file=%v: %s, want the row and then a marker", filePos, describe(*c))
				}
			}
		}
		if ok, _, err := Covers(after.Pos, row.Pos); !ok || err != nil || strings.Contains(after.Pos.Token, "|") {
			t.Fatalf("file=%v: marker %s after row %s: covers %v (%v), want a boundary after it", filePos, after.Pos, row.Pos, ok, err)
		}
		// Nothing moves: no marker, over several intervals.
		for end := time.Now().Add(4 * interval); time.Now().Before(end); {
			cs, err := r.Read(context.Background(), 10)
			if err != nil || len(cs) > 0 {
				t.Fatalf("file=%v idle: %s, %v", filePos, summary(cs), err)
			}
		}
		// Other tables' transactions, for a while: markers, spaced.
		var markers []sluice.Change
		take := func(cs []sluice.Change) int {
			for _, c := range cs {
				if c.Op != sluice.OpProgress || c.Table != nil || c.Key != nil || c.Row != nil || c.Pos.Kind != Kind || strings.Contains(c.Pos.Token, "|") {
					t.Fatalf("file=%v: %s (%+v), want a progress marker at a boundary", filePos, describe(c), c)
				}
				markers = append(markers, c)
			}
			return len(cs)
		}
		start := time.Now()
		for i := 0; time.Since(start) < 5*interval; i++ {
			dbtest.ExecSQL(t, db, fmt.Sprintf("INSERT INTO other VALUES (%d)", i))
			cs, err := r.Read(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			take(cs)
		}
		// The last one is due an interval after the one before: wait
		// until none came for a while.
		for quiet := time.Now(); time.Since(quiet) < 3*interval; {
			cs, err := r.Read(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			if take(cs) > 0 {
				quiet = time.Now()
			}
		}
		if len(markers) < 2 {
			t.Fatalf("file=%v: %d markers in %s of other tables' transactions", filePos, len(markers), time.Since(start))
		}
		if most := int(time.Since(start)/interval) + 1; len(markers) > most {
			t.Errorf("file=%v: %d markers in %s, at most %d at one per %s", filePos, len(markers), time.Since(start), most, interval)
		}
		for i := 1; i < len(markers); i++ {
			if ok, _, err := Covers(markers[i].Pos, markers[i-1].Pos); err != nil || !ok || markers[i].Pos == markers[i-1].Pos {
				t.Errorf("file=%v: marker %d (%s) is not after marker %d (%s): %v %v", filePos, i, markers[i].Pos, i-1, markers[i-1].Pos, ok, err)
			}
		}
		last := markers[len(markers)-1]
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (2)")
		next := readN(t, r, 1, false)[0]
		r.Close()
		// The last marker is where the reader was: right before the
		// next change's transaction.
		if base, _, _ := strings.Cut(next.Pos.Token, "|"); base != last.Pos.Token {
			t.Errorf("file=%v: last marker at %s, but the next change's transaction starts at %s", filePos, last.Pos, base)
		}
		// The marker resumes at the next change.
		r2 := open(t, d.DSN, cfg, last.Pos)
		if got := readN(t, r2, 1, false)[0]; describe(got) != describe(next) || got.Pos != next.Pos {
			t.Errorf("file=%v resume from marker %s: %s, want %s", filePos, last.Pos, describe(got), describe(next))
		}
		r2.Close()
		dbtest.ExecSQL(t, db, "DELETE FROM a", "DELETE FROM other")
	}
}

// TestStart: Start is the position a reader started from, as a token: with
// no position the source's position at Open, so that a stream started
// --from-now resumes there after a restart and misses nothing committed
// while it was down.
func TestStart(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY)")
	for _, filePos := range []bool{false, true} {
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (-1)") // before the start: not streamed
		cfg := Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos, FromNow: true}
		r := open(t, d.DSN, cfg, sluice.Position{})
		start := r.Start()
		if start.Kind != Kind || start.Token == "" || filePos != strings.HasPrefix(start.Token, "file:") {
			t.Fatalf("file=%v: Start() = %s", filePos, start)
		}
		r.Close() // the stream is down while the source commits
		dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (1)", "INSERT INTO a VALUES (2)")
		r2 := open(t, d.DSN, cfg, start)
		if r2.Start() != start {
			t.Errorf("file=%v: Start() of a reader opened at %s is %s", filePos, start, r2.Start())
		}
		cs := readN(t, r2, 2, true)
		if describe(cs[0]) != "insert a key=[] row=[1]" || describe(cs[1]) != "insert a key=[] row=[2]" {
			t.Errorf("file=%v from Start(): %s", filePos, summary(cs))
		}
		r2.Close()
		dbtest.ExecSQL(t, db, "DELETE FROM a")
	}
}

// TestPurgedPositionRefused: a position whose binlog the source purged is
// refused at Open with a named error, never started from a later place.
func TestPurgedPositionRefused(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE a (id INT PRIMARY KEY)")
	var old []sluice.Change
	for _, filePos := range []bool{false, true} {
		r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos}, sluice.Position{})
		dbtest.ExecSQL(t, db, fmt.Sprintf("INSERT INTO a VALUES (%d)", len(old)))
		old = append(old, readN(t, r, 1, false)[0])
		r.Close()
	}
	dbtest.ExecSQL(t, db, "FLUSH BINARY LOGS", "INSERT INTO a VALUES (10)", "FLUSH BINARY LOGS")
	rows, err := db.Query("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if !rows.Next() || rows.Scan(ptrs...) != nil {
		t.Fatal("SHOW MASTER STATUS")
	}
	rows.Close()
	current := asString(vals[0])
	dbtest.ExecSQL(t, db, "PURGE BINARY LOGS TO '"+current+"'")
	// The server may keep a file it still needs (crash recovery): name the
	// oldest it kept.
	var oldest string
	if err := db.QueryRow("SHOW BINARY LOGS").Scan(&oldest, new(any)); err != nil {
		t.Fatal(err)
	}
	for i, filePos := range []bool{false, true} {
		p := old[i].Pos
		_, err := Open(context.Background(), d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}, FilePositions: filePos}, p)
		var pe *PurgedError
		if !errors.As(err, &pe) {
			t.Fatalf("file=%v: Open at purged %s: %v, want a PurgedError", filePos, p, err)
		}
		for _, want := range []string{p.String(), "no longer has", "lost to this stream", "fresh copy", oldest} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("file=%v: error lacks %q: %v", filePos, want, err)
			}
		}
		if filePos {
			tok, _ := parseToken(p.Token)
			if !strings.Contains(err.Error(), "needs binlog "+tok.file) {
				t.Errorf("file=%v: error does not name binlog %s: %v", filePos, tok.file, err)
			}
		}
		t.Logf("file=%v: %v", filePos, err)
	}
	// A position the source still has opens.
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}}, sluice.Position{})
	dbtest.ExecSQL(t, db, "INSERT INTO a VALUES (11)")
	p := readN(t, r, 1, false)[0].Pos
	r.Close()
	open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "a")}}, p).Close()
}

// TestGeneratedColumns: the reader describes a generated column with its
// expression, and the row image (binlog_row_image=FULL) carries its
// computed values, VIRTUAL ones too, so that a plain target column can be
// written with them; after an ALTER adds one, the table map is followed
// and the new column's expression read from the server.
func TestGeneratedColumns(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE g (id INT PRIMARY KEY, price DECIMAL(10,2), qty INT, "+
		"total DECIMAL(12,2) AS (price * qty) STORED, half DECIMAL(12,3) AS (price / 2) VIRTUAL, doc JSON, "+
		"j_name VARCHAR(40) AS (JSON_VALUE(doc, '$.name')) VIRTUAL, KEY (j_name))")
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "g")}}, sluice.Position{})
	defer r.Close()
	gen := map[string]string{}
	for _, c := range r.Tables()[0].Columns {
		gen[c.Name] = c.Generated
	}
	if want := map[string]string{"id": "", "price": "", "qty": "", "total": "`price` * `qty`", "half": "`price` / 2", "doc": "",
		"j_name": "json_value(`doc`,'$.name')"}; fmt.Sprint(gen) != fmt.Sprint(want) {
		t.Errorf("described generation expressions %v, want %v", gen, want)
	}
	dbtest.ExecSQL(t, db, `INSERT INTO g (id, price, qty, doc) VALUES (1, 10.51, 3, '{"name": "a"}')`,
		"UPDATE g SET qty = 4, id = 2 WHERE id = 1", "DELETE FROM g WHERE id = 2",
		"ALTER TABLE g ADD COLUMN dbl INT AS (qty * 2) VIRTUAL", "INSERT INTO g (id, price, qty) VALUES (3, 1, 5)")
	// The ALTER is a schema change of its own, in its place.
	cs := readN(t, r, 5, true)
	want := []string{
		`insert g key=[] row=[1 10.51 3 31.53 5.255 {"name": "a"} a]`,
		`update g key=[1] row=[2 10.51 4 42.04 5.255 {"name": "a"} a]`,
		"delete g key=[2] row=[]",
		"schema change g key=[] row=[]",
		"insert g key=[] row=[3 1.00 5 5.00 0.500 NULL NULL 10]",
	}
	for i, c := range cs {
		if describe(c) != want[i] {
			t.Errorf("change %d: %s, want %s", i, describe(c), want[i])
		}
	}
	if c := cs[4].Table.Columns; len(c) != 8 || c[7].Generated != "`qty` * 2" || c[3].Generated != "`price` * `qty`" {
		t.Errorf("after the ALTER the table is described %+v, want the new column's expression too", c)
	}
}
