package dbtest

import (
	"context"
	"testing"
)

// TestEngineDatabase: on each engine a Database is a fresh, empty database
// of the name it reports, its session takes the params asked for, quoted
// odd names round-trip, and the comparison side reads it.
func TestEngineDatabase(t *testing.T) {
	for _, tc := range []struct {
		engine Engine
		params map[string]string
		// zone reads the session's time zone, set to UTC by params.
		zone, current string
	}{
		{PGEngine, map[string]string{"timezone": "UTC"}, "SHOW timezone", "SELECT current_database()"},
		{MariaEngine, map[string]string{"time_zone": "'+00:00'", "multiStatements": "true"}, "SELECT @@session.time_zone", "SELECT DATABASE()"},
	} {
		t.Run(tc.engine.String(), func(t *testing.T) {
			t.Parallel()
			odd := tc.engine.Quote("odd `\" name")
			d := tc.engine.DatabaseWith(t, tc.params,
				"CREATE TABLE "+odd+" (id int PRIMARY KEY, v varchar(10))",
				"INSERT INTO "+odd+" VALUES (1, 'a'), (2, 'b')")
			if got := d.QueryInt(t, "SELECT count(*) FROM "+odd); got != 2 {
				t.Errorf("count = %d, want 2", got)
			}
			ctx := context.Background()
			var zone, current string
			var err error
			if d.PG != nil {
				err = d.PG.QueryRow(ctx, tc.zone).Scan(&zone)
			} else {
				err = d.My.QueryRowContext(ctx, tc.zone).Scan(&zone)
			}
			if err != nil || (zone != "UTC" && zone != "+00:00") {
				t.Errorf("%s = %q, %v; want UTC from the params", tc.zone, zone, err)
			}
			if d.PG != nil {
				err = d.PG.QueryRow(ctx, tc.current).Scan(&current)
			} else {
				err = d.My.QueryRowContext(ctx, tc.current).Scan(&current)
			}
			if err != nil || current != d.Name {
				t.Errorf("%s = %q, %v; want %q", tc.current, current, err, d.Name)
			}
			other := tc.engine.Database(t)
			other.Exec(t, "CREATE TABLE "+odd+" (id int PRIMARY KEY, v varchar(10))",
				"INSERT INTO "+odd+" VALUES (1, 'a'), (2, 'c')")
			diffs, err := CompareTables(ctx, d.Side(), other.Side(), "odd `\" name")
			if err != nil {
				t.Fatal(err)
			}
			if diffs.Equal() {
				t.Error("CompareTables found two databases equal that differ in row 2")
			}
		})
	}
}

// TestViaProxy: the address ViaProxy returns reaches the same database
// through the proxy (its round trips count), on each engine.
func TestViaProxy(t *testing.T) {
	for _, engine := range Engines {
		t.Run(engine.String(), func(t *testing.T) {
			t.Parallel()
			d := engine.Database(t, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (7)")
			// The DSN is the URL on PostgreSQL.
			via, proxy := ViaProxy(t, d.DSN, engine.Shared(t).Addr(), 0)
			var got int
			var err error
			if engine == PGEngine {
				err = ConnectPG(t, via, nil).QueryRow(context.Background(), "SELECT id FROM t").Scan(&got)
			} else {
				err = OpenMy(t, via, nil).QueryRow("SELECT id FROM t").Scan(&got)
			}
			if err != nil || got != 7 {
				t.Errorf("read %d, %v through the proxy; want 7", got, err)
			}
			if proxy.RoundTrips() == 0 {
				t.Error("the proxy counted no round trips")
			}
		})
	}
}
