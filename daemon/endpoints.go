package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// The endpoint package opens sources and targets; these names keep the
// daemon's own code, and the callers written against it, as they were.
type (
	Engine        = endpoint.Engine
	reader        = endpoint.Reader
	target        = endpoint.Target
	sourceOptions = endpoint.SourceOptions
	targetOptions = endpoint.TargetOptions
)

const (
	EnginePostgres = endpoint.EnginePostgres
	EngineMySQL    = endpoint.EngineMySQL
	ModeTrigger    = endpoint.ModeTrigger
	ModeLogical    = endpoint.ModeLogical
	ModeBinlog     = endpoint.ModeBinlog
)

// openSource opens the stream's reader (endpoint.OpenSource); a log-read
// stream with nowhere to start is a usage error.
func openSource(ctx context.Context, o sourceOptions, from sluice.Position) (reader, error) {
	r, err := endpoint.OpenSource(ctx, o, from)
	var noStart *endpoint.NoStartError
	if errors.As(err, &noStart) {
		return nil, Fail(ExitUsage, err)
	}
	return r, err
}

// InstallCapture installs trigger capture for tables on a source, as
// `sluice source install` does.
func InstallCapture(ctx context.Context, sourceURL string, tables []sluice.TableName) error {
	return captureAdmin(ctx, sourceURL, tables, true)
}

// UninstallCapture removes stream's consumer of the changelog (so that it
// no longer holds rows back from pruning) and trigger capture from tables
// on a source, as `sluice source uninstall` does.
func UninstallCapture(ctx context.Context, sourceURL, stream string, tables []sluice.TableName) error {
	if err := unregisterConsumer(ctx, sourceURL, stream); err != nil {
		return err
	}
	return captureAdmin(ctx, sourceURL, tables, false)
}

// unregisterConsumer drops a stream's consumer position of a trigger
// source's changelog.
func unregisterConsumer(ctx context.Context, sourceURL, stream string) error {
	return withTriggerSource(ctx, sourceURL,
		func(conn *pgx.Conn) error { return pgtrigger.Unregister(ctx, conn, pgtrigger.DefaultSchema, stream) },
		func(db *sql.DB) error { return mytrigger.Unregister(ctx, db, stream) })
}

// SetupLogical creates (or completes) a PostgreSQL stream's publication
// and replication slot ahead of time; UninstallLogical drops them.
func SetupLogical(ctx context.Context, sourceURL, stream string, tables []sluice.TableName) error {
	return pglogical.Setup(ctx, sourceURL, pglogical.Config{Tables: tables, Stream: stream})
}

// UninstallLogical drops a PostgreSQL stream's replication slot and
// publication.
func UninstallLogical(ctx context.Context, sourceURL, stream string, tables []sluice.TableName) error {
	return pglogical.Uninstall(ctx, sourceURL, pglogical.Config{Tables: tables, Stream: stream})
}

func captureAdmin(ctx context.Context, sourceURL string, tables []sluice.TableName, install bool) error {
	return withTriggerSource(ctx, sourceURL,
		func(conn *pgx.Conn) error {
			if install {
				return pgtrigger.Install(ctx, conn, pgtrigger.DefaultSchema, tables)
			}
			return pgtrigger.Uninstall(ctx, conn, pgtrigger.DefaultSchema, tables)
		},
		func(db *sql.DB) error {
			if install {
				return mytrigger.Install(ctx, db, tables)
			}
			return mytrigger.Uninstall(ctx, db, tables)
		})
}

// withTriggerSource connects to a trigger source and runs the function for
// its engine on the connection.
func withTriggerSource(ctx context.Context, sourceURL string, pg func(*pgx.Conn) error, my func(*sql.DB) error) error {
	eng, err := endpoint.EngineOf(sourceURL)
	if err != nil {
		return fmt.Errorf("--source: %w", err)
	}
	switch eng {
	case EnginePostgres:
		conn, err := endpoint.ConnectPostgres(ctx, sourceURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return pg(conn)
	case EngineMySQL:
		db, err := endpoint.ConnectMySQL(sourceURL)
		if err != nil {
			return err
		}
		defer db.Close()
		return my(db)
	}
	return fmt.Errorf("--source: %s sources are not supported", eng)
}
