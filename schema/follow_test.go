package schema

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// followCase is a source table, its target, and a follower between them.
type followCase struct {
	src, dst *DB
	f        *Follower
	name     sluice.TableName
	pos      int
}

func newFollowCase(t *testing.T, from, to dbtest.Engine, mode string) *followCase {
	t.Helper()
	ddl := "CREATE TABLE t (id int PRIMARY KEY, a varchar(40), b int NOT NULL, c int)"
	fc := &followCase{src: newDB(t, from.Database(t, ddl)), name: sluice.TableName{Name: "t"}}
	if from == dbtest.PGEngine {
		fc.name.Schema = "public"
	}
	fc.dst = newDB(t, to.Database(t))
	opt := PlanOptions{From: fc.src.Engine, To: fc.dst.Engine, Flavor: fc.dst.Flavor}
	st, err := fc.src.ReadTable(context.Background(), fc.name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan([]*Table{st}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.dst.Run(context.Background(), nil, p.Steps(PhaseCreate), nil); err != nil {
		t.Fatal(err)
	}
	fc.f = &Follower{Stream: "s", Mode: mode, Opt: opt, Target: fc.dst, Source: fc.src, Log: slog.New(slog.DiscardHandler)}
	return fc
}

// change runs ddl on the source and returns the schema change a reader
// would hand out for it.
func (fc *followCase) change(t *testing.T, ddl string, edits ...sluice.SchemaEdit) *sluice.Change {
	t.Helper()
	ctx := context.Background()
	before := fc.table(t)
	if err := fc.src.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	fc.pos++
	return &sluice.Change{Op: sluice.OpSchema, Table: fc.table(t), Pos: sluice.Position{Kind: "test", Token: strings.Repeat("x", fc.pos)},
		Schema: &sluice.SchemaChange{Before: before, Edits: edits}}
}

// table is the source table as a reader describes it.
func (fc *followCase) table(t *testing.T) *sluice.Table {
	t.Helper()
	st, err := fc.src.ReadTable(context.Background(), fc.name)
	if err != nil {
		t.Fatal(err)
	}
	out := &sluice.Table{Name: fc.name}
	for _, c := range st.Columns {
		out.Columns = append(out.Columns, sluice.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable})
	}
	out.Key = []int{out.ColumnIndex("id")}
	return out
}

// follow runs what the follower returns on the target, as a stream's
// batch does.
func (fc *followCase) follow(t *testing.T, c *sluice.Change) ([]string, error) {
	t.Helper()
	stmts, err := fc.f.Statements(context.Background(), c)
	for _, s := range stmts {
		if err := fc.dst.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return stmts, err
}

// TestFollowerDoesNothingTwice: every followed change, replayed (a kill -9
// between a MySQL target's DDL, which commits on its own, and the
// checkpoint), finds its statements done on the target and runs none; the
// target ends as the source's table, by the diff.
func TestFollowerDoesNothingTwice(t *testing.T) {
	for _, from := range dbtest.Engines {
		for _, to := range dbtest.Engines {
			t.Run(from.String()+"_to_"+to.String(), func(t *testing.T) {
				t.Parallel()
				fc := newFollowCase(t, from, to, "follow")
				widen, notNull := "ALTER TABLE t ALTER COLUMN a TYPE varchar(80)", "ALTER TABLE t ALTER COLUMN c SET NOT NULL"
				dropNotNull := "ALTER TABLE t ALTER COLUMN b DROP NOT NULL"
				if from == dbtest.MariaEngine {
					widen, notNull, dropNotNull = "ALTER TABLE t MODIFY a varchar(80)", "ALTER TABLE t MODIFY c int NOT NULL", "ALTER TABLE t MODIFY b int NULL"
				}
				for _, step := range []struct {
					ddl  string
					edit sluice.SchemaEdit
				}{
					{"ALTER TABLE t ADD COLUMN d int NOT NULL DEFAULT 5", sluice.SchemaEdit{Kind: sluice.AddColumn, Column: "d", Fill: sluice.Text("5")}},
					{"ALTER TABLE t ADD COLUMN e varchar(10) DEFAULT 'it''s'", sluice.SchemaEdit{Kind: sluice.AddColumn, Column: "e", Fill: sluice.Text("it's")}},
					{widen, sluice.SchemaEdit{Kind: sluice.AlterColumnType, Column: "a"}},
					{notNull, sluice.SchemaEdit{Kind: sluice.SetNotNull, Column: "c"}},
					{dropNotNull, sluice.SchemaEdit{Kind: sluice.DropNotNull, Column: "b"}},
					{"CREATE INDEX t_a ON t (a, b)", sluice.SchemaEdit{Kind: sluice.CreateIndex, Index: &sluice.Index{Name: "t_a", Columns: []string{"a", "b"}}}},
					{"CREATE UNIQUE INDEX t_e ON t (e)", sluice.SchemaEdit{Kind: sluice.CreateIndex, Index: &sluice.Index{Name: "t_e", Columns: []string{"e"}, Unique: true}}},
					{"ALTER TABLE t DROP COLUMN c", sluice.SchemaEdit{Kind: sluice.DropColumn, Column: "c"}},
					// A PostgreSQL source drops the index with the column
					// (and its reader says so, as it reads the catalog); a
					// MySQL one narrows the index to its other column.
					{"ALTER TABLE t DROP COLUMN b", sluice.SchemaEdit{Kind: sluice.DropColumn, Column: "b"}},
				} {
					edits := []sluice.SchemaEdit{step.edit}
					if from == dbtest.PGEngine && step.edit.Column == "b" && step.edit.Kind == sluice.DropColumn {
						edits = append(edits, sluice.SchemaEdit{Kind: sluice.DropIndex, Index: &sluice.Index{Name: "t_a"}})
					}
					c := fc.change(t, step.ddl, edits...)
					stmts, err := fc.follow(t, c)
					if err != nil || len(stmts) == 0 {
						t.Fatalf("%s: %v, %v", step.ddl, stmts, err)
					}
					again, err := fc.follow(t, c)
					if err != nil || len(again) != 0 {
						t.Fatalf("%s replayed: %v, %v", step.ddl, again, err)
					}
				}
				st, err := fc.src.ReadTable(context.Background(), fc.name)
				if err != nil {
					t.Fatal(err)
				}
				dt, err := fc.dst.ReadTable(context.Background(), TargetName(fc.f.Opt.From, fc.f.Opt.To, fc.name))
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range Diff(st, dt, fc.f.Opt) {
					t.Errorf("after following: %s", d)
				}
			})
		}
	}
}

// TestFollowerStops: a rename, a narrowing type, an added column whose
// rows got values of their own, and, in stop mode, every change, stop the
// stream with the statements to run on the target; started again before
// the target matches, it stops again; after, it goes on.
func TestFollowerStops(t *testing.T) {
	for _, e := range dbtest.Engines {
		t.Run(e.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			narrow := "ALTER TABLE t ALTER COLUMN a TYPE varchar(20)"
			if e == dbtest.MariaEngine {
				narrow = "ALTER TABLE t MODIFY a varchar(20)"
			}
			for _, tc := range []struct {
				name, mode, ddl string
				edit            sluice.SchemaEdit
				want            []string
				fix             string // "" : starting again is the confirmation
			}{
				{"rename", "follow", "ALTER TABLE t RENAME COLUMN a TO a2", sluice.SchemaEdit{Kind: sluice.RenameColumn, Column: "a", To: "a2"},
					[]string{"column a was renamed to a2", "RENAME COLUMN", "start sluice again"}, "ALTER TABLE t RENAME COLUMN a TO a2"},
				{"narrowing", "follow", narrow, sluice.SchemaEdit{Kind: sluice.AlterColumnType, Column: "a"},
					[]string{"narrowed from", "(20)", "keeps the wider type"}, ""},
				{"volatile", "follow", "ALTER TABLE t ADD COLUMN r int", sluice.SchemaEdit{Kind: sluice.AddColumn, Column: "r", Volatile: true, Reason: "its default was volatile"},
					[]string{"column r was added", "ADD COLUMN", "--repair"}, "ALTER TABLE t ADD COLUMN r int"},
				{"stop mode", "stop", "ALTER TABLE t ADD COLUMN s int", sluice.SchemaEdit{Kind: sluice.AddColumn, Column: "s", Fill: sluice.Null},
					[]string{"--schema-changes is stop", "ADD COLUMN"}, "ALTER TABLE t ADD COLUMN s int"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					fc := newFollowCase(t, e, e, tc.mode)
					c := fc.change(t, tc.ddl, tc.edit)
					for try := 0; try < 2; try++ {
						stmts, err := fc.follow(t, c)
						if err == nil || !IsStop(err) || len(stmts) != 0 {
							t.Fatalf("try %d: %v, %v; want a stop", try, stmts, err)
						}
						for _, w := range tc.want {
							if !strings.Contains(err.Error(), w) {
								t.Errorf("stop %q lacks %q", err, w)
							}
						}
						if try == 0 && tc.fix == "" {
							break // started again: that is the operator's word
						}
					}
					if tc.fix != "" {
						if err := fc.dst.Exec(ctx, tc.fix); err != nil {
							t.Fatal(err)
						}
					}
					if stmts, err := fc.follow(t, c); err != nil || len(stmts) != 0 {
						t.Fatalf("after the target was made to match: %v, %v", stmts, err)
					}
					if key, err := NewJournal(fc.dst, "s").StoppedAt(ctx); err != nil || key != "" {
						t.Errorf("the stop record is left: %q, %v", key, err)
					}
				})
			}
		})
	}
}

// TestJournalFinishesAfterKill: the steps of a plan recorded on the target
// and stopped after the tables' creation (a kill between the copy and the
// index build) are finished by the next run, from a new session, and by
// none after it.
func TestJournalFinishesAfterKill(t *testing.T) {
	for _, e := range dbtest.Engines {
		t.Run(e.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := newDB(t, e.Database(t, "CREATE TABLE p (id int PRIMARY KEY, u int UNIQUE)",
				"CREATE TABLE c (id int PRIMARY KEY, p int REFERENCES p (id) ON DELETE CASCADE, v int)", "CREATE INDEX c_v ON c (v)"))
			names := []sluice.TableName{{Name: "p"}, {Name: "c"}}
			if e == dbtest.PGEngine {
				names[0].Schema, names[1].Schema = "public", "public"
			}
			tables, err := src.ReadTables(ctx, names)
			if err != nil {
				t.Fatal(err)
			}
			d := e.Database(t)
			dst := newDB(t, d)
			opt := PlanOptions{From: src.Engine, To: dst.Engine, Flavor: dst.Flavor}
			p, err := BuildPlan(tables, opt)
			if err != nil {
				t.Fatal(err)
			}
			j := NewJournal(dst, "s")
			if err := j.Record(ctx, p); err != nil {
				t.Fatal(err)
			}
			if _, err := j.Run(ctx, nil, PhaseCreate); err != nil {
				t.Fatal(err)
			}
			// The next run, over a session of its own.
			again := NewJournal(newDB(t, d), "s")
			pending, err := again.Pending(ctx)
			if err != nil || len(pending) == 0 {
				t.Fatalf("pending after the kill: %v, %v", pending, err)
			}
			n, err := again.Run(ctx, nil, PhaseCreate, PhaseIndexes, PhaseForeignKeys)
			if err != nil || n != len(pending) {
				t.Fatalf("ran %d of %d: %v", n, len(pending), err)
			}
			if n, err := again.Run(ctx, nil, PhaseCreate, PhaseIndexes, PhaseForeignKeys); err != nil || n != 0 {
				t.Fatalf("a third run ran %d: %v", n, err)
			}
			for _, st := range tables {
				dt, err := dst.ReadTable(ctx, TargetName(opt.From, opt.To, st.Name))
				if err != nil {
					t.Fatal(err)
				}
				for _, diff := range Diff(st, dt, opt) {
					t.Errorf("%s: %s", st.Name, diff)
				}
			}
		})
	}
}
