package cutover

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func TestBehind(t *testing.T) {
	pos := func(kind, tok string) sluice.Position { return sluice.Position{Kind: kind, Token: tok} }
	for _, tc := range []struct {
		name       string
		have, want sluice.Position
		n          float64
		unit       string
		ok         bool
	}{
		{"wal boundary", pos("pglogical", "0/1000/0"), pos("pglogical", "0/1800/0"), 0x800, "bytes of WAL", true},
		{"wal inside a transaction", pos("pglogical", "0/1000@0/F00.2"), pos("pglogical", "1/0/0"), 1<<32 - 0x1000, "bytes of WAL", true},
		{"wal ahead", pos("pglogical", "0/2000/0"), pos("pglogical", "0/1800/0"), 0, "bytes of WAL", true},
		{"binlog file", pos("binlog", "file:bin.000003:400|x|@500:0"), pos("binlog", "file:bin.000003:1400"), 1000, "bytes of binlog", true},
		{"binlog other file", pos("binlog", "file:bin.000003:400"), pos("binlog", "file:bin.000004:100"), 0, "", false},
		{"mariadb gtid", pos("binlog", "mariadb:0-1-40,1-2-7"), pos("binlog", "mariadb:0-1-42,1-2-10"), 5, "transactions", true},
		{"mysql gtid", pos("binlog", "mysql:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57"), pos("binlog", "mysql:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-60"), 0, "", false},
		{"changelog", pos("mytrigger", "17"), pos("mytrigger", "40"), 23, "changelog rows", true},
		{"kinds differ", pos("mytrigger", "17"), pos("pglogical", "0/1/0"), 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, unit, ok := behind(tc.have, tc.want)
			if n != tc.n || unit != tc.unit || ok != tc.ok {
				t.Fatalf("behind(%s, %s) = %v %q %v; want %v %q %v", tc.have, tc.want, n, unit, ok, tc.n, tc.unit, tc.ok)
			}
		})
	}
}

func TestPlanReverse(t *testing.T) {
	pgA, pgB := "postgres://app:pw@db1:5432/shop", "postgres://app:pw2@db2:5432/shop"
	myA, myB := "mysql://app:pw@db1:3306/shop", "mysql://app:pw2@db2:3306/shop"
	tables := func(names ...string) []sluice.TableName {
		var out []sluice.TableName
		for _, n := range names {
			tn, err := sluice.ParseTableName(n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, tn)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		f        Forward
		readOnly bool
		tables   string // the reverse stream's, comma-separated
		target   string // the reverse stream's target, as Config prints it
		err      string
	}{
		{name: "postgres to postgres keeps the schema", f: Forward{ID: "s", Source: pgA, Target: pgB, Tables: tables("public.orders", "shop.lines")},
			tables: "public.orders,shop.lines", target: "postgres://app:xxxxx@db1:5432/shop"},
		{name: "postgres to mysql", f: Forward{ID: "s", Source: pgA, Target: myB, Tables: tables("orders", "public.lines")},
			tables: "orders,lines", target: "postgres://app:xxxxx@db1:5432/shop"},
		{name: "mysql to postgres", f: Forward{ID: "s", Source: myA, Target: pgB, Tables: tables("orders")}, tables: "orders", target: "mysql://app:xxxxx@db1:3306/shop"},
		{name: "read-only postgres source", f: Forward{ID: "s", Source: pgA, Target: myB, Tables: tables("orders")}, readOnly: true,
			tables: "orders", target: "postgres://app:xxxxx@db1:5432/shop?default_transaction_read_only=off"},
		{name: "read-only mysql source needs no setting", f: Forward{ID: "s", Source: myA, Target: myB, Tables: tables("orders")}, readOnly: true,
			tables: "orders", target: "mysql://app:xxxxx@db1:3306/shop"},
		{name: "schema lost across engines", f: Forward{ID: "s", Source: pgA, Target: myB, Tables: tables("shop.orders")}, err: "must be in schema public"},
		{name: "sluice's own table", f: Forward{ID: "s", Source: pgA, Target: pgB, Tables: tables("sluice.checkpoint")}, err: "sluice's own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanReverse(tc.f, "", tc.readOnly)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tn := range p.Tables {
				got = append(got, tn.String())
			}
			if strings.Join(got, ",") != tc.tables || p.ID != "s-reverse" || p.Source != tc.f.Target {
				t.Fatalf("plan %+v: tables %v, want %s", p, got, tc.tables)
			}
			conf := p.Config()
			if !strings.Contains(conf, `target = "`+tc.target+`"`) || strings.Contains(conf, "pw") {
				t.Fatalf("config block:\n%s\nwant target %s and no password", conf, tc.target)
			}
		})
	}
	if _, err := PlanReverse(Forward{ID: "s", Source: pgA, Target: pgB}, "s", false); err == nil {
		t.Fatal("a reverse stream with the forward stream's id was accepted")
	}
}

func TestWithReadWrite(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5432/db":                 "postgres://u:p@h:5432/db?default_transaction_read_only=off",
		"postgres://u:p@h:5432/db?sslmode=require": "postgres://u:p@h:5432/db?default_transaction_read_only=off&sslmode=require",
		"host=h user=u dbname=db":                  "host=h user=u dbname=db default_transaction_read_only=off",
	} {
		got, err := withReadWrite(in)
		if err != nil || got != want {
			t.Errorf("withReadWrite(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// FuzzBehind: any two tokens give a distance that is never negative, or
// none, and never a panic.
func FuzzBehind(f *testing.F) {
	for _, s := range [][3]string{
		{"pglogical", "0/1000/0", "0/1800@0/1700.3"},
		{"binlog", "file:bin.000003:400|x|@500:0", "file:bin.000003:1400"},
		{"binlog", "mariadb:0-1-40,1-2-7", "mariadb:0-1-42"},
		{"mytrigger", "17", "40"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, kind, have, want string) {
		n, _, ok := behind(sluice.Position{Kind: kind, Token: have}, sluice.Position{Kind: kind, Token: want})
		if ok && n < 0 {
			t.Fatalf("behind(%q, %q) = %v", have, want, n)
		}
	})
}
