package dbtest

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestPostgres(t *testing.T) {
	t.Parallel()
	pg := PG(t)
	db := PGDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn, err := pgx.Connect(ctx, pg.URL(db))
	if err != nil {
		t.Fatalf("connect to fresh database: %v", err)
	}
	defer conn.Close(ctx)
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		t.Fatalf("show wal_level: %v", err)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical", walLevel)
	}
	var current string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil {
		t.Fatalf("current_database: %v", err)
	}
	if current != db {
		t.Errorf("current_database() = %q, want %q", current, db)
	}

	bad := strings.Replace(pg.URL(db), pg.Password, "wrong-pw", 1)
	if c, err := pgx.Connect(ctx, bad); err == nil {
		c.Close(ctx)
		t.Error("connecting with a wrong password succeeded")
	}
}

func TestPostgresCreateDropRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private server")
	}
	skipIfNoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := pg.CreateDatabase(ctx, "Mixed Case"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.URL("Mixed Case"))
	if err != nil {
		t.Fatalf("connect to created database: %v", err)
	}
	// DropDatabase must force out the open session.
	if err := pg.DropDatabase(ctx, "Mixed Case"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := pg.CreateDatabase(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	port := pg.Port
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if pg.Port != port {
		t.Errorf("port changed across restart: %d -> %d", port, pg.Port)
	}
	conn, err = pgx.Connect(ctx, pg.URL("kept"))
	if err != nil {
		t.Fatalf("database lost across restart: %v", err)
	}
	conn.Close(ctx)
}

func TestDatabaseName(t *testing.T) {
	t.Run("Sub/With Spaces-and.Dots_"+strings.Repeat("x", 80), func(t *testing.T) {
		name := databaseName(t)
		if len(name) > 63 {
			t.Errorf("name %q is %d bytes, want <= 63", name, len(name))
		}
		for _, r := range name {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				t.Errorf("name %q contains %q", name, r)
			}
		}
		if databaseName(t) == name {
			t.Error("two calls gave the same name")
		}
	})
}

func TestMariaDB(t *testing.T) {
	t.Parallel()
	m := Maria(t)
	dbName := MariaDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	db, err := sql.Open("mysql", m.DSN(dbName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var format, image, logBin, current string
	if err := db.QueryRowContext(ctx, "SELECT @@binlog_format, @@binlog_row_image, @@log_bin, DATABASE()").Scan(&format, &image, &logBin, &current); err != nil {
		t.Fatalf("query binlog settings: %v", err)
	}
	if format != "ROW" || image != "FULL" || logBin != "1" {
		t.Errorf("binlog_format=%s binlog_row_image=%s log_bin=%s, want ROW FULL 1", format, image, logBin)
	}
	if current != dbName {
		t.Errorf("DATABASE() = %q, want %q", current, dbName)
	}

	bad, err := sql.Open("mysql", strings.Replace(m.DSN(dbName), m.Password, "wrong-pw", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.PingContext(ctx); err == nil {
		t.Error("connecting with a wrong password succeeded")
	}
}

func TestMariaDBCreateDropRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private server")
	}
	skipIfNoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := StartMariaDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := m.CreateDatabase(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	if err := m.CreateDatabase(ctx, "dropped"); err != nil {
		t.Fatal(err)
	}
	// DropDatabase must force out a session holding a metadata lock.
	busy, err := sql.Open("mysql", m.DSN("dropped"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tx, err := busy.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS x (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := m.DropDatabase(ctx, "dropped"); err != nil {
		t.Fatal(err)
	}
	port := m.Port
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Port != port {
		t.Errorf("port changed across restart: %d -> %d", port, m.Port)
	}
	db, err := sql.Open("mysql", m.DSN("kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("database lost across restart: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'dropped'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("dropped database still exists")
	}
}

// TestReportServerLogsNamesKilledSession: a session killed on the shared
// MariaDB server must show in what a failed run prints of the server's
// log, with its database and the killer's thread, so that a test that saw
// its connection cut can tell who cut it.
func TestReportServerLogsNamesKilledSession(t *testing.T) {
	ctx := context.Background()
	m := Maria(t)
	name := "dbtest_killed_session"
	if err := m.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	defer m.DropDatabase(ctx, name)
	victim, err := sql.Open("mysql", m.DSN(name))
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	conn, err := victim.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "KILL "+strconv.FormatInt(id, 10)); err != nil {
		t.Fatal(err)
	}
	// The server writes its note as the killed session ends: poll for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var b strings.Builder
		reportServerLogs(&b)
		// MariaDB's line is written by the killer's thread: "N [Warning]
		// Aborted connection <id> to db: '<db>' … (KILLED)".
		if strings.Contains(b.String(), "Aborted connection "+strconv.FormatInt(id, 10)+" to db: '"+name+"'") && strings.Contains(b.String(), "(KILLED)") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report does not name the killed session (thread %d, database %s):\n%s", id, name, b.String())
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}
