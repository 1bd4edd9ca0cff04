package integration

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/daemon"
)

// TestMySQLCaptureOfIgnoredUpdates pins two MariaDB behaviours the capture
// triggers work around: AFTER UPDATE fires for a row that UPDATE IGNORE
// left alone on a duplicate key (that must not be captured), and a
// TIMESTAMP(6) compares false with <=> inside a trigger (a real primary-key
// change of a row with a timestamp must still be captured).
func TestMySQLCaptureOfIgnoredUpdates(t *testing.T) {
	ctx := context.Background()
	src := newEndpoint(t, daemon.EngineMySQL)
	if err := src.createSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := installMy(ctx, src, daemon.StreamOptions{Tables: tableNames(t, []string{"items"})}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	captured := func(id int) int {
		var n int
		if err := src.my.QueryRowContext(ctx, "SELECT COUNT(*) FROM sluice_changelog WHERE op = 'U' AND JSON_VALUE(k, '$.id') = ?", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 0; i < 20; i++ {
		names, phs, args := "id", "?", []any{i}
		for _, c := range xcols {
			names += ", " + c.name
			phs += ", ?"
			args = append(args, src.arg(c, c.gen(r)))
		}
		if err := src.exec(ctx, "INSERT INTO items ("+names+") VALUES ("+phs+")", args...); err != nil {
			t.Fatal(err)
		}
		if err := src.exec(ctx, "UPDATE IGNORE items SET id = id + 800 WHERE id = ?", i); err != nil {
			t.Fatal(err)
		}
		if n := captured(i); n != 1 {
			t.Errorf("row %d: primary-key change captured %d times, want 1 (values %v)", i, n, args)
		}
	}
	// 801 exists: moving 800 onto it is ignored, and must not be captured.
	if err := src.exec(ctx, "UPDATE IGNORE items SET id = 801 WHERE id = 800"); err != nil {
		t.Fatal(err)
	}
	if n := captured(800); n != 0 {
		t.Errorf("an update that UPDATE IGNORE skipped was captured %d times", n)
	}
}
