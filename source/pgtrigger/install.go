package pgtrigger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
)

// DefaultSchema owns sluice's objects on the source unless Config.Schema
// says otherwise.
const DefaultSchema = "sluice"

// Object names inside the sluice schema.
const (
	changelogTable = "changelog"
	captureFunc    = "capture"
)

// triggerName is the name of the capture trigger on a replicated table. It
// names the schema so that two sluice streams with their own schemas can
// capture the same table.
func triggerName(schema string) string {
	n := schema + "_capture"
	if len(n) > 63 { // NAMEDATALEN-1: PostgreSQL would truncate it anyway
		n = n[:63]
	}
	return n
}

func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// normalize fills the defaults of a table list: schema "public".
func normalize(tables []sluice.TableName) []sluice.TableName {
	out := make([]sluice.TableName, len(tables))
	for i, t := range tables {
		if t.Schema == "" {
			t.Schema = "public"
		}
		out[i] = t
	}
	return out
}

// installSQL creates the changelog and the capture function.
//
// The changelog stores row images as json, not jsonb: json keeps the text
// of json columns byte-exact. xid is the writing top-level transaction; the
// reader uses it to cut the changelog into snapshot windows, hence its
// index.
//
// The capture function is generic (row_to_json plus the trigger arguments:
// the table's name as sluice knows it, then its primary key columns) so a
// later ALTER TABLE on the source never makes it raise. It is SECURITY
// DEFINER so the application's roles need no privilege on sluice's schema,
// with a fixed search_path as such functions must have. Its SET clauses
// pin the settings that change how row_to_json renders values, and are
// restored when it returns, so the application's session never sees them:
// extra_float_digits 3 gives the shortest exact float text whatever the
// writer's session asked for, IntervalStyle postgres gives interval text
// the reader's session parses the same way (sql_standard text reads
// differently under another style). Dates and times are rendered in ISO
// 8601 with an explicit offset by row_to_json whatever DateStyle and
// TimeZone say.
func installSQL(schema string) []string {
	s := ident(schema)
	log := ident(schema, changelogTable)
	return []string{
		fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s`, s),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id bigserial PRIMARY KEY,
	xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
	tbl text NOT NULL,
	op "char" NOT NULL,
	key json,
	data json
)`, log),
		// When the change was captured (the writing statement's start), for
		// apply lag; the commit time is not known without
		// track_commit_timestamp. A stable default adds the column
		// without rewriting an existing changelog.
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS at timestamptz NOT NULL DEFAULT statement_timestamp()`, log),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (xid)`, ident(changelogTable+"_xid_idx"), log),
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET extra_float_digits = 3
SET IntervalStyle = postgres
AS $sluice$
DECLARE
	old_row json;
	old_key json;
BEGIN
	-- TG_ARGV[0] is the table as sluice names it (a partition's trigger
	-- still names its parent), the rest its primary key columns.
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %s (tbl, op, data) VALUES (TG_ARGV[0], 'I', row_to_json(NEW));
		RETURN NULL;
	END IF;
	old_row := row_to_json(OLD);
	SELECT json_object_agg(k, old_row -> k) INTO old_key FROM unnest(TG_ARGV[1:]) AS k;
	IF TG_OP = 'UPDATE' THEN
		INSERT INTO %s (tbl, op, key, data) VALUES (TG_ARGV[0], 'U', old_key, row_to_json(NEW));
	ELSE
		INSERT INTO %s (tbl, op, key) VALUES (TG_ARGV[0], 'D', old_key);
	END IF;
	RETURN NULL;
END
$sluice$`, ident(schema, captureFunc), log, log, log),
	}
}

// Install creates, in schema, the changelog table and the capture function,
// and the capture trigger on each table. It is idempotent: what exists and
// is current is kept; a trigger whose key columns no longer match the
// table's primary key is replaced. It runs in one transaction.
func Install(ctx context.Context, conn *pgx.Conn, schema string, tables []sluice.TableName) error {
	if schema == "" {
		schema = DefaultSchema
	}
	tables = normalize(tables)
	// Installing takes locks that wait behind every open transaction on the
	// tables (ALTER TABLE, CREATE TRIGGER) and make every later writer
	// queue behind them: on a busy source that stalls the application. So
	// when everything is in place, change nothing; and when something must
	// change, give up after a few seconds with an error rather than stall.
	if current, err := installed(ctx, conn, schema, tables); err != nil {
		return err
	} else if current {
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("install sluice capture in schema %s: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	// Concurrent installs would race on CREATE ... IF NOT EXISTS.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice pgtrigger install ' || $1))`, schema); err != nil {
		return fmt.Errorf("install sluice capture in schema %s: lock: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		return fmt.Errorf("install sluice capture in schema %s: %w", schema, err)
	}
	for _, q := range installSQL(schema) {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("install sluice changelog in schema %s: %w", schema, lockHint(err))
		}
	}
	db := tx.Conn().Config().Database
	for _, t := range tables {
		info, err := lookupTable(ctx, tx, db, t)
		if err != nil {
			return err
		}
		want := triggerArgs(t, info.keyNames())
		have, found, err := lookupTrigger(ctx, tx, info.oid, schema)
		if err != nil {
			return err
		}
		if found && have.enabled() && slices.Equal(have.args, want) {
			continue
		}
		qt := ident(t.Schema, t.Name)
		if found {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`DROP TRIGGER %s ON %s`, ident(triggerName(schema)), qt)); err != nil {
				return fmt.Errorf("replace capture trigger on %s: %w", t, lockHint(err))
			}
		}
		lits := make([]string, len(want))
		for i, a := range want {
			lits[i] = quoteLiteral(a)
		}
		q := fmt.Sprintf(`CREATE TRIGGER %s AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s)`,
			ident(triggerName(schema)), qt, ident(schema, captureFunc), strings.Join(lits, ", "))
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("create capture trigger on %s: %w", t, lockHint(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("install sluice capture in schema %s: commit: %w", schema, err)
	}
	return nil
}

// Uninstall drops the capture trigger from each table (tables that do not
// exist are skipped). When no table in the database is captured into
// schema any more, it also drops the changelog, with every change not yet
// read, and the capture function, and then the schema if nothing else is
// in it. So uninstalling every table removes everything sluice created;
// uninstalling some keeps the changelog for the others.
func Uninstall(ctx context.Context, conn *pgx.Conn, schema string, tables []sluice.TableName) error {
	if schema == "" {
		schema = DefaultSchema
	}
	tables = normalize(tables)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice pgtrigger install ' || $1))`, schema); err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: lock: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
	}
	for _, t := range tables {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ident(t.Schema, t.Name)).Scan(&exists); err != nil {
			return fmt.Errorf("uninstall capture trigger from %s: %w", t, err)
		}
		if !exists {
			continue
		}
		q := fmt.Sprintf(`DROP TRIGGER IF EXISTS %s ON %s`, ident(triggerName(schema)), ident(t.Schema, t.Name))
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("drop capture trigger on %s: %w", t, lockHint(err))
		}
	}
	var fn *uint32
	if err := tx.QueryRow(ctx, `SELECT to_regprocedure($1)::oid`, ident(schema, captureFunc)+"()").Scan(&fn); err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
	}
	if fn != nil {
		var left int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgfoid = $1`, *fn).Scan(&left); err != nil {
			return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
		}
		if left > 0 {
			return commit(ctx, tx, schema)
		}
	}
	for _, q := range []string{
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, ident(schema, captureFunc)),
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, ident(schema, changelogTable)),
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
		}
	}
	var other bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_depend d JOIN pg_namespace n ON d.refobjid = n.oid
		WHERE d.refclassid = 'pg_namespace'::regclass AND n.nspname = $1)`, schema).Scan(&other)
	if err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
	}
	if !other {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DROP SCHEMA IF EXISTS %s`, ident(schema))); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
	}
	return commit(ctx, tx, schema)
}

func commit(ctx context.Context, tx pgx.Tx, schema string) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: commit: %w", schema, err)
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal. Trigger arguments must be
// literals; standard_conforming_strings is on in every supported server.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// triggerArgs are the capture trigger's arguments for a table: its name as
// sluice writes it into the changelog, then its primary key columns.
func triggerArgs(t sluice.TableName, key []string) []string {
	return append([]string{ident(t.Schema, t.Name)}, key...)
}

// trigger is a capture trigger as pg_trigger has it.
type trigger struct {
	args []string
	// mode is pg_trigger.tgenabled: O fires in origin and local mode, A
	// always, R only on replicas, D never.
	mode string
}

func (t trigger) enabled() bool { return t.mode == "O" || t.mode == "A" }

// queryer is what a *pgx.Conn and a pgx.Tx share.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// lookupTrigger finds sluice's capture trigger on a table.
func lookupTrigger(ctx context.Context, q queryer, rel uint32, schema string) (trigger, bool, error) {
	var raw []byte
	var t trigger
	err := q.QueryRow(ctx, `SELECT tgargs, tgenabled::text FROM pg_trigger
		WHERE tgrelid = $1 AND tgname = $2 AND tgfoid = to_regprocedure($3)`,
		rel, triggerName(schema), ident(schema, captureFunc)+"()").Scan(&raw, &t.mode)
	if errors.Is(err, pgx.ErrNoRows) {
		return trigger{}, false, nil
	}
	if err != nil {
		return trigger{}, false, fmt.Errorf("look up trigger %s: %w", triggerName(schema), err)
	}
	t.args = splitTriggerArgs(raw)
	return t, true, nil
}

// splitTriggerArgs decodes pg_trigger.tgargs: each argument followed by a
// NUL byte.
func splitTriggerArgs(raw []byte) []string {
	var args []string
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, 0)
		if i < 0 {
			args = append(args, string(raw))
			break
		}
		args = append(args, string(raw[:i]))
		raw = raw[i+1:]
	}
	return args
}

// installed reports whether the changelog, the current capture function and
// a current, enabled trigger on every table are all in place, using only
// catalog reads (no locks that writers would queue behind).
func installed(ctx context.Context, conn *pgx.Conn, schema string, tables []sluice.TableName) (bool, error) {
	stmts := installSQL(schema)
	fn := stmts[len(stmts)-1]
	body := fn[strings.Index(fn, "$sluice$")+len("$sluice$") : strings.LastIndex(fn, "$sluice$")]
	var ok bool
	err := conn.QueryRow(ctx, `
		SELECT to_regclass($1) IS NOT NULL
		   AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'at' AND NOT attisdropped)
		   AND EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure($2) AND prosrc = $3)`,
		ident(schema, changelogTable), ident(schema, captureFunc)+"()", body).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check sluice capture in schema %s: %w", schema, err)
	}
	if !ok {
		return false, nil
	}
	db := conn.Config().Database
	for _, t := range tables {
		info, err := lookupTable(ctx, conn, db, t)
		if err != nil {
			return false, err
		}
		have, found, err := lookupTrigger(ctx, conn, info.oid, schema)
		if err != nil {
			return false, err
		}
		if !found || !have.enabled() || !slices.Equal(have.args, triggerArgs(t, info.keyNames())) {
			return false, nil
		}
	}
	return true, nil
}

// lockHint explains a lock timeout during install.
func lockHint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return fmt.Errorf("%w: installing capture needs a brief exclusive lock that a long-running transaction on the source holds; "+
			"sluice gave up after 5 s rather than make the application's writes queue behind it: retry when the transaction has finished "+
			"(see pg_stat_activity), or run `sluice source install` at a quiet time", err)
	}
	return err
}
