package binlog

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/mycopy"
)

// KeyReader reads a MySQL or MariaDB source's rows by primary key inside
// one consistent snapshot, each value in the text this package's reader
// gives it (the initial copy's rendering: FLOAT exact, not the text
// protocol's 6 digits).
type KeyReader interface {
	// ReadKeys emits the rows of t (a schema-qualified source table)
	// whose keys are keys; a key without a row is left out.
	ReadKeys(ctx context.Context, t *sluice.Table, keys []sluice.Row, emit func([]sluice.Row) error) error
	Close() error
}

// OpenKeyReader connects to the source at dsn and begins the snapshot
// (REPEATABLE READ, WITH CONSISTENT SNAPSHOT) before it returns: it holds
// every change committed before the call. sluice verify --repair reads
// the source's current rows of the keys it found differing with it.
func OpenKeyReader(ctx context.Context, dsn string) (KeyReader, error) {
	db, ci, err := openDB(dsn)
	if err != nil {
		return nil, err
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("binlog: connect to the source %s:%d as %s: %w", ci.host, ci.port, ci.user, err)
	}
	return mycopy.Begin(ctx, db, mycopy.Config{Style: mycopy.Binlog, MariaDB: strings.Contains(strings.ToLower(version), "mariadb")})
}
