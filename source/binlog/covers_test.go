package binlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

func TestCovers(t *testing.T) {
	const (
		u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
		u2 = "4f22ab58-82db-22f2-af44-d91bb0530673"
	)
	pos := func(tok string) sluice.Position { return sluice.Position{Kind: Kind, Token: tok} }
	cases := []struct {
		name    string
		p, c    string
		covered bool
		err     string // non-empty: an error containing it
	}{
		// MariaDB GTID positions (one GTID per domain).
		{name: "maria same row", p: "mariadb:0-1-42|0-1-43|@900:0", c: "mariadb:0-1-42|0-1-43|@900:0", covered: true},
		{name: "maria earlier row in event", p: "mariadb:0-1-42|0-1-43|@900:3", c: "mariadb:0-1-42|0-1-43|@900:2", covered: true},
		{name: "maria later row in event", p: "mariadb:0-1-42|0-1-43|@900:2", c: "mariadb:0-1-42|0-1-43|@900:3"},
		{name: "maria earlier event", p: "mariadb:0-1-42|0-1-43|@900:0", c: "mariadb:0-1-42|0-1-43|@850:7", covered: true},
		{name: "maria later event", p: "mariadb:0-1-42|0-1-43|@850:7", c: "mariadb:0-1-42|0-1-43|@900:0"},
		{name: "maria boundary before the txn", p: "mariadb:0-1-42", c: "mariadb:0-1-42|0-1-43|@900:0"},
		{name: "maria boundary after the txn", p: "mariadb:0-1-43", c: "mariadb:0-1-42|0-1-43|@900:0", covered: true},
		{name: "maria boundary far after", p: "mariadb:0-1-99", c: "mariadb:0-1-42|0-1-43|@900:0", covered: true},
		{name: "maria boundary far before", p: "mariadb:0-1-10", c: "mariadb:0-1-42|0-1-43|@900:0"},
		{name: "maria row of a later txn", p: "mariadb:0-1-50|0-1-51|@100:0", c: "mariadb:0-1-42|0-1-43|@900:0", covered: true},
		{name: "maria row of an earlier txn", p: "mariadb:0-1-42|0-1-43|@900:0", c: "mariadb:0-1-50|0-1-51|@100:0"},
		{name: "maria other server same domain (failover)", p: "mariadb:0-2-60", c: "mariadb:0-1-42|0-1-43|@900:0", covered: true},
		{name: "maria two domains covered", p: "mariadb:0-1-42,1-7-12", c: "mariadb:0-1-42,1-7-11|1-7-12|@300:0", covered: true},
		{name: "maria two domains before", p: "mariadb:0-1-40,1-7-11", c: "mariadb:0-1-42,1-7-11|1-7-12|@300:0"},
		// c's transaction is the first after c's base: a p past that base
		// in another domain but without c's transaction is no history.
		{name: "maria other domain ahead, txn missing", p: "mariadb:0-1-43,1-7-11", c: "mariadb:0-1-42,1-7-11|1-7-12|@300:0", err: "not from one binlog history"},
		{name: "maria domain new at c", p: "mariadb:0-1-42", c: "mariadb:0-1-42|1-7-1|@300:0"},
		{name: "maria domains disagree", p: "mariadb:0-1-50,1-7-5", c: "mariadb:0-1-42,1-7-11|1-7-12|@300:0", err: "not from one binlog history"},
		{name: "maria covered txn but base ahead", p: "mariadb:0-1-43,1-7-1", c: "mariadb:0-1-42,1-7-5|0-1-43|@300:0", err: "not from one binlog history"},
		{name: "maria same seq other server", p: "mariadb:0-2-43", c: "mariadb:0-1-42|0-1-43|@900:0", err: "share domain and sequence"},
		{name: "maria same base other txn", p: "mariadb:0-1-42|0-1-44|@900:0", c: "mariadb:0-1-42|0-1-43|@900:0", err: "different transactions"},
		// A boundary change (TRUNCATE, a progress marker).
		{name: "maria boundary change at p", p: "mariadb:0-1-43", c: "mariadb:0-1-43", covered: true},
		{name: "maria boundary change before p's row", p: "mariadb:0-1-43|0-1-44|@100:0", c: "mariadb:0-1-43", covered: true},
		{name: "maria boundary change after p's row", p: "mariadb:0-1-42|0-1-43|@100:0", c: "mariadb:0-1-43"},
		{name: "maria boundary change after p", p: "mariadb:0-1-42", c: "mariadb:0-1-43"},
		{name: "maria boundary change incomparable", p: "mariadb:0-1-42,1-1-9", c: "mariadb:0-1-43,1-1-2", err: "not from one binlog history"},
		// Tokens of earlier versions count the streamed tables' changes.
		{name: "old k same txn", p: "mariadb:0-1-42|0-1-43|3", c: "mariadb:0-1-42|0-1-43|2", covered: true},
		{name: "old k same txn later", p: "mariadb:0-1-42|0-1-43|2", c: "mariadb:0-1-42|0-1-43|3"},
		{name: "old k txn finished at p", p: "mariadb:0-1-43", c: "mariadb:0-1-42|0-1-43|7", covered: true},
		{name: "old k vs new row in one txn", p: "mariadb:0-1-42|0-1-43|@900:0", c: "mariadb:0-1-42|0-1-43|2", err: "cannot be compared exactly"},
		{name: "new row vs old k in one txn", p: "mariadb:0-1-42|0-1-43|2", c: "mariadb:0-1-42|0-1-43|@900:0", err: "cannot be compared exactly"},
		{name: "old k of an earlier txn", p: "mariadb:0-1-50|0-1-51|@10:0", c: "mariadb:0-1-42|0-1-43|4", covered: true},
		// MySQL GTID sets.
		{name: "mysql row same txn", p: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900:1", c: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900:0", covered: true},
		{name: "mysql txn in set", p: "mysql:" + u1 + ":1-60", c: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900:0", covered: true},
		{name: "mysql txn not in set", p: "mysql:" + u1 + ":1-57", c: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900:0"},
		{name: "mysql other uuid", p: "mysql:" + u1 + ":1-57," + u2 + ":1-5", c: "mysql:" + u1 + ":1-57," + u2 + ":1-4|" + u2 + ":5|@40:0", covered: true},
		{name: "mysql other uuid before", p: "mysql:" + u1 + ":1-50", c: "mysql:" + u1 + ":1-57|" + u2 + ":1|@40:0"},
		{name: "mysql ahead but txn missing", p: "mysql:" + u1 + ":1-58", c: "mysql:" + u1 + ":1-57|" + u2 + ":1|@40:0", err: "not from one binlog history"},
		{name: "mysql out-of-order gnos (a replica's binlog)", p: "mysql:" + u1 + ":1-57:59", c: "mysql:" + u1 + ":1-57|" + u1 + ":59|@40:0", covered: true},
		{name: "mysql incomparable", p: "mysql:" + u1 + ":1-60", c: "mysql:" + u1 + ":1-57," + u2 + ":1-3|" + u1 + ":58|@40:0", err: "not from one binlog history"},
		{name: "mysql anonymous txn", p: "mysql:" + u1 + ":1-60", c: "mysql:" + u1 + ":1-57||@40:0", err: "anonymous"},
		{name: "mysql anonymous txn same base", p: "mysql:" + u1 + ":1-57||@50:0", c: "mysql:" + u1 + ":1-57||@40:0", covered: true},
		{name: "mysql tagged gtid", p: "mysql:" + u1 + ":1-57:blue:1-3", c: "mysql:" + u1 + ":1-57:blue:1-2|" + u1 + ":blue:3|@40:0", covered: true},
		{name: "mysql compressed payload events", p: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900+3:0", c: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900+2:5", covered: true},
		{name: "mysql compressed payload later event", p: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900+2:5", c: "mysql:" + u1 + ":1-57|" + u1 + ":58|@900+3:0"},
		// file:offset positions.
		{name: "file same row", p: "file:mysql-bin.000003:1234|0-1-9|@2000:4", c: "file:mysql-bin.000003:1234|0-1-9|@2000:4", covered: true},
		{name: "file later row", p: "file:mysql-bin.000003:1234|0-1-9|@2000:4", c: "file:mysql-bin.000003:1234|0-1-9|@2100:0"},
		{name: "file boundary after", p: "file:mysql-bin.000003:2500", c: "file:mysql-bin.000003:1234|0-1-9|@2000:4", covered: true},
		{name: "file boundary before", p: "file:mysql-bin.000003:1234", c: "file:mysql-bin.000003:1234|0-1-9|@2000:4"},
		{name: "file earlier file", p: "file:mysql-bin.000002:90000", c: "file:mysql-bin.000003:4||@300:0"},
		{name: "file later file", p: "file:mysql-bin.000004:4", c: "file:mysql-bin.000003:1234||@2000:0", covered: true},
		{name: "file numbers past six digits", p: "file:mysql-bin.1000000:4", c: "file:mysql-bin.999999:1234||@2000:0", covered: true},
		{name: "file row of a later txn", p: "file:mysql-bin.000003:5000||@5200:0", c: "file:mysql-bin.000003:1234||@2000:0", covered: true},
		{name: "file boundary change", p: "file:mysql-bin.000003:5000||@5200:0", c: "file:mysql-bin.000003:5000", covered: true},
		{name: "file other series", p: "file:other-bin.000009:4", c: "file:mysql-bin.000003:1234||@2000:0", err: "not of one series"},
		{name: "file same base other txn", p: "file:mysql-bin.000003:1234|0-1-9|@2000:0", c: "file:mysql-bin.000003:1234|0-1-8|@2000:0", err: "different transactions"},
		// Not comparable at all.
		{name: "modes differ", p: "file:mysql-bin.000003:1234", c: "mariadb:0-1-42|0-1-43|@900:0", err: "mariadb"},
		{name: "bad token", p: "mariadb:0-1-42|x", c: "mariadb:0-1-42|0-1-43|@900:0", err: "wrong number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			covered, done, err := Covers(pos(c.p), pos(c.c))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Covers(%s, %s) = %v, %v, %v; want an error with %q", c.p, c.c, covered, done, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Covers(%s, %s): %v", c.p, c.c, err)
			}
			if covered != c.covered || done != !c.covered {
				t.Errorf("Covers(%s, %s) = covered %v, done %v; want covered %v", c.p, c.c, covered, done, c.covered)
			}
		})
	}
	if _, _, err := Covers(sluice.Position{Kind: "pglogical", Token: "0/1"}, pos("mariadb:0-1-42")); err == nil {
		t.Error("a pglogical position was compared")
	}
}

// TestServable: a GTID position whose transactions were in purged binlogs
// is refused (the MySQL case cannot run against the harness's MariaDB).
func TestServable(t *testing.T) {
	const u1, u2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4f22ab58-82db-22f2-af44-d91bb0530673"
	cases := []struct {
		name, tok, oldest string // oldest: where the oldest binlog starts, or gtid_purged
		purged            bool
	}{
		{"maria at the start", "mariadb:0-1-42", "0-1-42", false},
		{"maria after the start", "mariadb:0-1-50|0-1-51|@90:0", "0-1-42", false},
		{"maria before the start", "mariadb:0-1-41", "0-1-42", true},
		{"maria several servers in the list", "mariadb:0-2-40", "0-1-39,0-2-40", false},
		{"maria behind the list's newest", "mariadb:0-1-39", "0-1-39,0-2-40", true},
		{"maria domain missing from the position", "mariadb:0-1-42", "0-1-42,1-1-5", true},
		{"maria domain only in the position", "mariadb:0-1-42,1-1-5", "0-1-42", false},
		{"maria first binlog", "mariadb:0-1-1", "", false},
		{"mysql nothing purged", "mysql:" + u1 + ":1-57", "", false},
		{"mysql purged part read", "mysql:" + u1 + ":1-57", u1 + ":1-40", false},
		{"mysql purged past the position", "mysql:" + u1 + ":1-57", u1 + ":1-60", true},
		{"mysql other server purged", "mysql:" + u1 + ":1-57", u1 + ":1-40,\n" + u2 + ":1-3", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := parseToken(c.tok)
			if err != nil {
				t.Fatal(err)
			}
			from := sluice.Position{Kind: Kind, Token: c.tok}
			if p.mode == modeMariaDB {
				err = mariaServable(p, from, "mysql-bin.000007", c.oldest)
			} else {
				err = mysqlServable(p, from, "mysql-bin.000007", c.oldest)
			}
			var pe *PurgedError
			if got := errors.As(err, &pe); got != c.purged || (!got && err != nil) {
				t.Fatalf("%s against %q: %v, want purged=%v", c.tok, c.oldest, err, c.purged)
			}
			if c.purged && (!strings.Contains(err.Error(), from.String()) || !strings.Contains(err.Error(), "mysql-bin.000007")) {
				t.Errorf("error does not name the position and the oldest binlog: %v", err)
			}
		})
	}
}
