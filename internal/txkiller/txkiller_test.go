package txkiller

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitKilled waits until k has killed want transactions.
func waitKilled(t *testing.T, k *Killer, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for k.Killed() < want {
		if time.Now().After(deadline) {
			t.Fatalf("killer killed %d transactions within %v, want %d", k.Killed(), within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	pg := dbtest.PG(t)
	url := pg.URL(dbtest.PGDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const maxAge = 500 * time.Millisecond
	k, err := StartPostgres(ctx, url, maxAge, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	short, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close(ctx)
	long, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close(ctx)

	if _, err := long.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	// A transaction well inside the limit survives, while the long one ages.
	for range 3 {
		if _, err := short.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(maxAge / 5)
		if _, err := short.Exec(ctx, "COMMIT"); err != nil {
			t.Fatalf("short transaction was disturbed: %v", err)
		}
	}
	waitKilled(t, k, 1, 10*time.Second)
	if _, err := long.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("statement on a killed transaction's connection succeeded")
	}
	if _, err := short.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("idle connection outside a transaction was killed: %v", err)
	}
	if got := k.Killed(); got != 1 {
		t.Errorf("Killed() = %d, want 1", got)
	}
}

func TestMariaDB(t *testing.T) {
	t.Parallel()
	d := dbtest.MariaEngine.Database(t, "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
	dsn, db := d.DSN, d.My
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// InnoDB's trx_started has whole seconds, hence a 1 s limit.
	const maxAge = time.Second
	k, err := StartMariaDB(ctx, dsn, maxAge, minMariaDBInterval)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	long, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback()
	// InnoDB starts the transaction at its first statement, not at BEGIN.
	if _, err := long.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		short, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := short.ExecContext(ctx, "INSERT INTO t VALUES (?)", 100+i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(maxAge / 5)
		if err := short.Commit(); err != nil {
			t.Fatalf("short transaction was disturbed: %v", err)
		}
	}
	waitKilled(t, k, 1, 10*time.Second)
	if _, err := long.ExecContext(ctx, "INSERT INTO t VALUES (2)"); err == nil {
		t.Error("statement on a killed transaction's connection succeeded")
	}
	if got := k.Killed(); got != 1 {
		t.Errorf("Killed() = %d, want 1", got)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("table has %d rows, want the 3 short transactions' rows", n)
	}
}
