package pgcatalog

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func partitionNames(ps []Partition) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ",")
}

// TestLeaves: the leaves at every level, not the partitioned partitions
// between; none for a plain table; a pending detach is not a leaf.
func TestLeaves(t *testing.T) {
	ctx := context.Background()
	d := dbtest.PGEngine.Database(t,
		`CREATE TABLE plain (id int PRIMARY KEY)`,
		`CREATE TABLE ev (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)`,
		`CREATE TABLE ev_1 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')`,
		`CREATE TABLE ev_2 PARTITION OF ev FOR VALUES FROM ('2026-02-01') TO ('2026-03-01') PARTITION BY HASH (id)`,
		`CREATE TABLE ev_2a PARTITION OF ev_2 FOR VALUES WITH (MODULUS 2, REMAINDER 0)`,
		`CREATE TABLE ev_2b PARTITION OF ev_2 FOR VALUES WITH (MODULUS 2, REMAINDER 1)`,
		`CREATE TABLE ev_d PARTITION OF ev DEFAULT`)
	for _, tt := range []struct{ table, want string }{
		{"plain", "<nil>"},
		{"ev", "public.ev_1,public.ev_2a,public.ev_2b,public.ev_d"},
		{"ev_2", "public.ev_2a,public.ev_2b"},
	} {
		name := sluice.TableName{Schema: "public", Name: tt.table}
		oid, _, err := Table(ctx, d.PG, d.Name, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Leaves(ctx, d.PG, name, oid)
		if err != nil {
			t.Fatal(err)
		}
		s := partitionNames(got)
		if got == nil {
			s = "<nil>"
		}
		if s != tt.want {
			t.Errorf("Leaves(%s) = %s, want %s", tt.table, s, tt.want)
		}
	}
}

// TestReconcile walks a partitioned table through every change of its
// partitions and checks what Reconcile makes of each: a partition created
// as one, or attached empty, is followed; one attached holding rows, and
// one detached or dropped, is an event, once; a partitioned partition
// attached holding rows in its own partitions is one too.
func TestReconcile(t *testing.T) {
	ctx := context.Background()
	d := dbtest.PGEngine.Database(t,
		`CREATE TABLE ev (id int, day date, v text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)`,
		`CREATE TABLE ev_1 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')`,
		`CREATE TABLE ev_2 PARTITION OF ev FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')`,
		`INSERT INTO ev VALUES (1, '2026-01-05', 'a'), (2, '2026-02-05', 'b')`)
	name := sluice.TableName{Schema: "public", Name: "ev"}
	oid, _, err := Table(ctx, d.PG, d.Name, name)
	if err != nil {
		t.Fatal(err)
	}
	tables := []Partitioned{{Name: name, OID: oid}}
	rec, events, joined, err := Reconcile(ctx, d.PG, tables, Record{})
	if err != nil || len(events) != 0 || len(joined) != 0 || partitionNames(rec["public.ev"].Leaves) != "public.ev_1,public.ev_2" {
		t.Fatalf("first Reconcile = %s, %v, %v, %v; want both partitions recorded and nothing else", rec.Marshal(), events, joined, err)
	}
	// The record survives its text form.
	if rec, err = ParseRecord(rec.Marshal()); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name   string
		stmts  []string
		joined string
		events []Event
		leaves string
	}{
		{"created as a partition, then written", []string{
			`CREATE TABLE ev_3 PARTITION OF ev FOR VALUES FROM ('2026-03-01') TO ('2026-04-01')`,
			`INSERT INTO ev VALUES (3, '2026-03-05', 'c')`,
		}, "public.ev_3", nil, "public.ev_1,public.ev_2,public.ev_3"},
		{"created and attached in one transaction", []string{
			`BEGIN; CREATE TABLE ev_4 (LIKE ev); ALTER TABLE ev ATTACH PARTITION ev_4 FOR VALUES FROM ('2026-04-01') TO ('2026-05-01'); COMMIT`,
		}, "public.ev_4", nil, "public.ev_1,public.ev_2,public.ev_3,public.ev_4"},
		{"attached empty, then written", []string{
			`CREATE TABLE ev_5 (LIKE ev)`,
			`ALTER TABLE ev ATTACH PARTITION ev_5 FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')`,
			`INSERT INTO ev VALUES (5, '2026-05-05', 'e')`,
		}, "public.ev_5", nil, "public.ev_1,public.ev_2,public.ev_3,public.ev_4,public.ev_5"},
		{"attached holding rows", []string{
			`CREATE TABLE ev_6 (LIKE ev)`,
			`INSERT INTO ev_6 VALUES (6, '2026-06-05', 'f')`,
			`ALTER TABLE ev ATTACH PARTITION ev_6 FOR VALUES FROM ('2026-06-01') TO ('2026-07-01')`,
		}, "", []Event{{"public.ev", "public.ev_6", EventJoinedWithRows}}, "public.ev_1,public.ev_2,public.ev_3,public.ev_4,public.ev_5"},
		{"nothing changed: the event is not repeated", nil, "", nil, "public.ev_1,public.ev_2,public.ev_3,public.ev_4,public.ev_5"},
		{"detached", []string{`ALTER TABLE ev DETACH PARTITION ev_1`}, "",
			[]Event{{"public.ev", "public.ev_1", EventLeft}}, "public.ev_2,public.ev_3,public.ev_4,public.ev_5"},
		{"dropped", []string{`DROP TABLE ev_2`}, "",
			[]Event{{"public.ev", "public.ev_2", EventLeft}}, "public.ev_3,public.ev_4,public.ev_5"},
		{"a partitioned partition attached holding rows in its own partition", []string{
			`CREATE TABLE ev_7 (LIKE ev) PARTITION BY HASH (id)`,
			`CREATE TABLE ev_7a PARTITION OF ev_7 FOR VALUES WITH (MODULUS 1, REMAINDER 0)`,
			`INSERT INTO ev_7 VALUES (7, '2026-07-05', 'g')`,
			`ALTER TABLE ev ATTACH PARTITION ev_7 FOR VALUES FROM ('2026-07-01') TO ('2026-08-01')`,
		}, "", []Event{{"public.ev", "public.ev_7a", EventJoinedWithRows}}, "public.ev_3,public.ev_4,public.ev_5"},
	} {
		for _, q := range step.stmts {
			d.Exec(t, q)
		}
		next, events, joined, err := Reconcile(ctx, d.PG, tables, rec)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := partitionNames(joined); got != step.joined {
			t.Errorf("%s: joined %q, want %q", step.name, got, step.joined)
		}
		if !slices.Equal(events, step.events) {
			t.Errorf("%s: events %v, want %v", step.name, events, step.events)
		}
		if got := partitionNames(next["public.ev"].Leaves); got != step.leaves {
			t.Errorf("%s: leaves %s, want %s", step.name, got, step.leaves)
		}
		for _, e := range events {
			if err := e.Err(); !errors.Is(err, ErrPartitionsChanged) || !strings.Contains(err.Error(), e.Partition) {
				t.Errorf("%s: event error %v does not name %s", step.name, err, e.Partition)
			}
			if back, err := ParseEvent(e.Marshal()); err != nil || back != e {
				t.Errorf("%s: event %v read back as %v, %v", step.name, e, back, err)
			}
		}
		rec = next
	}
	// A detached partition's changes before it left still belong to the
	// table: the record still names it.
	if root, p := rec.Root(rec["public.ev"].Gone[1].OID); root != "public.ev" || p == nil || p.Name != "public.ev_1" {
		t.Errorf("Root of the detached partition = %q, %v; want public.ev, public.ev_1", root, p)
	}
}
