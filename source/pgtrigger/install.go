package pgtrigger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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
	// consumerTable has a row per stream reading the changelog: the
	// position it has acknowledged, see consumer.go.
	consumerTable = "consumer"
	// prunedTable has one row: every changelog row ever pruned (or lost to
	// a TRUNCATE of the changelog) belongs to a transaction at or below
	// its xid.
	prunedTable  = "pruned"
	captureFunc  = "capture"
	truncateFunc = "capture_truncate"
	// logTruncFunc marks lost every consumer that a TRUNCATE of the
	// changelog takes rows from, from the changelog's own BEFORE TRUNCATE
	// trigger.
	logTruncFunc    = "changelog_truncated"
	logTruncTrigger = "changelog_truncated"
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

// truncateTriggerName is the name of the statement-level TRUNCATE trigger
// on a replicated table and on each of its partitions.
func truncateTriggerName(schema string) string {
	const suffix = "_truncate"
	for len(schema)+len(suffix) > 63 {
		_, size := utf8.DecodeLastRuneInString(schema)
		schema = schema[:len(schema)-size]
	}
	return schema + suffix
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

// tableSQL creates the schema, the changelog, the consumer table and the
// pruned table, or adds what an older install lacks.
//
// The changelog stores row images as json, not jsonb: json keeps the text
// of json columns byte-exact. xid is the writing top-level transaction; the
// reader uses it to cut the changelog into snapshot windows, hence its
// index. op is I, U or D for a row, T for a TRUNCATE of the table and P
// for a TRUNCATE of one of its partitions (key then names the partition)
// or, written by a reader, for a change of its partitions that stops the
// stream (key then holds a pgcatalog.Event).
func tableSQL(schema string) []string {
	log := ident(schema, changelogTable)
	return []string{
		fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s`, ident(schema)),
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
		// row_to_json writes SQL NULL and the JSON value null alike, so
		// for the nullable json and jsonb columns whose value the image
		// shows as null the capture function records which one it is, as
		// {"column": true} for SQL NULL and false for JSON null. NULL when
		// there is no such column (every row of a table without json
		// columns). Nullable and without a default, it is added without
		// rewriting an existing changelog.
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS nulls jsonb`, log),
		// row_to_json writes an array as a JSON array, which starts at 1
		// in every dimension: for the array columns whose lower bounds
		// are not all 1 the capture function records the bounds, as
		// {"column": "[0:1][2:3]"} (array_dims). NULL when no array of
		// the row needs it, and in every row an older capture wrote.
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS dims jsonb`, log),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (xid)`, ident(changelogTable+"_xid_idx"), log),
		// pos is the position the stream has acknowledged, or opened at; lost
		// says why the changelog can no longer serve it.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	stream text PRIMARY KEY,
	pos text NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT now(),
	acked_at timestamptz,
	lost text
)`, ident(schema, consumerTable)),
		// partitions is the stream's record of the partitions of its
		// partitioned tables (see partitions.go), JSON; NULL until the
		// stream's first reader writes it.
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS partitions text`, ident(schema, consumerTable)),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	xid xid8 NOT NULL,
	at timestamptz NOT NULL DEFAULT now()
)`, ident(schema, prunedTable)),
	}
}

// function is one of sluice's trigger functions in its schema.
type function struct {
	name string
	// set holds the function's SET clauses.
	set  string
	body string
}

func (f function) create(schema string) string {
	return fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger\nLANGUAGE plpgsql SECURITY DEFINER\nSET search_path = pg_catalog, pg_temp\n%sAS $sluice$%s$sluice$",
		ident(schema, f.name), f.set, f.body)
}

// functions are sluice's trigger functions. Each is SECURITY DEFINER so
// the application's roles need no privilege on sluice's schema, with a
// fixed search_path as such functions must have.
//
// The capture function is generic (row_to_json plus the trigger arguments:
// the table's name as sluice knows it, then its primary key columns) so a
// later ALTER TABLE on the source never makes it raise.
//
// row_to_json writes a json or jsonb value verbatim and SQL NULL as null,
// so a column holding the JSON value null and one holding SQL NULL leave
// the same image. A table with nullable json or jsonb columns has them as
// further trigger arguments, after an empty one (which no column name can
// be). For those whose member in the image is null the function asks the
// row which null it is and records the answers in the changelog's nulls
// column: setting the column to SQL NULL (json_populate_record) leaves the
// row's binary image (*=) as it is exactly when it is SQL NULL. That costs
// a few microseconds per value, where a dynamic statement naming the
// column costs tens; the statement is the fallback for a column whose type
// has become a domain that refuses NULL, which makes the test raise. The
// null members are found by a text search of a short image; a long one
// (a large document) costs more to search, or to parse, than the test, so
// there every such column is tested. Names the row lacks (columns dropped
// or renamed since the install) are never named in a statement, so no
// ALTER TABLE makes the function raise. Tables without such columns keep
// the arguments they had, and the statements: the function looks for the
// empty argument, finds none and captures as it did before, as it does
// for a trigger installed by an older sluice.
//
// row_to_json also writes every array as a JSON array, which starts at 1
// in every dimension: '[0:1]={7,8}' reads back as '{7,8}'. A table with
// array columns has them as trigger arguments after a second empty one.
// For each that the image has as a JSON array the function puts the
// image's array back into the row (json_populate_record, a few
// microseconds); when that changes the row's binary image it asks the
// row for the array's bounds (a dynamic statement, tens) and records
// those not all 1 in the changelog's dims column, which the reader
// prefixes to the array's text. Should the test raise (a domain whose
// check depends on the bounds, a column no longer an array), each array
// is asked directly and what is no array skipped, so no ALTER TABLE
// makes the function raise. The bounds are those of the new image: an
// array key column's bounds in the old key, and an array inside a
// composite value, are not recorded.
//
// Its SET clauses pin the settings that change how row_to_json renders
// values, and are restored when it returns, so the application's session
// never sees them: extra_float_digits 3 gives the shortest exact float
// text whatever the writer's session asked for, IntervalStyle postgres
// gives interval text the reader's session parses the same way
// (sql_standard text reads differently under another style). Dates and times are rendered in ISO
// 8601 with an explicit offset by row_to_json whatever DateStyle and
// TimeZone say.
//
// The truncate function appends a T row for a TRUNCATE of the table. A
// TRUNCATE of one partition does not fire the partitioned table's
// trigger, so each partition has the trigger too, with a second argument:
// it appends a P row (which stops the stream: the target cannot truncate
// part of a table) unless the partitioned table's own truncate is what
// emptied it, i.e. the table's latest change in this transaction is a T
// (a TRUNCATE of the table fires its trigger first, then its partitions',
// and holds every partition locked, so nothing can have been written to
// the partition in between). A partition detached since keeps its trigger,
// but its TRUNCATE is no longer the table's, and appends nothing.
//
// The changelog's own BEFORE TRUNCATE trigger marks lost the consumers
// whose positions do not cover every row about to go, and raises the
// pruned xid to the truncating transaction's, so that no stream resumes
// from before it as if nothing had happened.
func functions(schema string) []function {
	log := ident(schema, changelogTable)
	return []function{
		{name: captureFunc, set: "SET extra_float_digits = 3\nSET IntervalStyle = postgres\n", body: fmt.Sprintf(`
DECLARE
	-- TG_ARGV[0] is the table as sluice names it (a partition's trigger
	-- still names its parent), then its primary key columns and, for a
	-- table with nullable json or jsonb columns or array columns, '' and
	-- the json columns, then for one with array columns '' and those.
	json_at int := array_position(TG_ARGV, '');
	arr_at int;
	new_row json;
	old_row json;
	old_key json;
	img text;
	col text;
	cols text[];
	is_null boolean;
	nulls jsonb;
	arrs text[];
	dim text;
	dims jsonb;
BEGIN
	IF json_at IS NULL THEN
		-- No json columns: the statements of the capture before nulls,
		-- at its cost.
		IF TG_OP = 'INSERT' THEN
			INSERT INTO %[1]s (tbl, op, data) VALUES (TG_ARGV[0], 'I', row_to_json(NEW));
			RETURN NULL;
		END IF;
		old_row := row_to_json(OLD);
		SELECT json_object_agg(k, old_row -> k) INTO old_key FROM unnest(TG_ARGV[1:]) AS k;
		IF TG_OP = 'UPDATE' THEN
			INSERT INTO %[1]s (tbl, op, key, data) VALUES (TG_ARGV[0], 'U', old_key, row_to_json(NEW));
		ELSE
			INSERT INTO %[1]s (tbl, op, key) VALUES (TG_ARGV[0], 'D', old_key);
		END IF;
		RETURN NULL;
	END IF;
	arr_at := array_position(TG_ARGV, '', json_at + 1);
	IF TG_OP <> 'DELETE' THEN
		new_row := row_to_json(NEW);
		-- The columns to test: those whose member in the image is null.
		-- A text search finds them, with harmless false positives (the
		-- member inside another json value); on a long image it costs
		-- more than testing every column.
		IF pg_column_size(new_row) > 1024 THEN
			cols := TG_ARGV[json_at + 1:coalesce(arr_at, TG_NARGS) - 1];
		ELSE
			img := new_row::text;
			FOREACH col IN ARRAY TG_ARGV[json_at + 1:coalesce(arr_at, TG_NARGS) - 1] LOOP
				IF strpos(img, to_json(col)::text || ':null') > 0 THEN
					cols := cols || col;
				END IF;
			END LOOP;
		END IF;
		IF cardinality(cols) > 0 THEN
			BEGIN
				FOREACH col IN ARRAY cols LOOP
					-- Setting the column to SQL NULL leaves the row as it
					-- is exactly when it is SQL NULL. A name the row lacks
					-- (dropped or renamed since the install) changes
					-- nothing, and no reader asks about it.
					nulls := coalesce(nulls, '{}') || jsonb_build_object(col, NEW *= json_populate_record(NEW, json_build_object(col, NULL)));
				END LOOP;
			EXCEPTION WHEN OTHERS THEN
				-- A column's type has become a domain that refuses NULL:
				-- ask the row, naming only columns it has.
				nulls := NULL;
				FOREACH col IN ARRAY cols LOOP
					IF new_row -> col IS NOT NULL THEN
						EXECUTE format('SELECT ($1).%%I IS NULL', col) INTO is_null USING NEW;
						nulls := coalesce(nulls, '{}') || jsonb_build_object(col, is_null);
					END IF;
				END LOOP;
			END;
		END IF;
		-- The arrays whose image may have lost its bounds: those the
		-- image has as a JSON array (a name the row lacks has none).
		IF arr_at IS NOT NULL THEN
			FOREACH col IN ARRAY TG_ARGV[arr_at + 1:] LOOP
				IF json_typeof(new_row -> col) = 'array' THEN
					arrs := arrs || col;
				END IF;
			END LOOP;
		END IF;
		IF arrs IS NOT NULL THEN
			BEGIN
				FOREACH col IN ARRAY arrs LOOP
					-- Putting the image's array back leaves the row as it
					-- is exactly when nothing was lost: a few microseconds,
					-- where asking the row for its bounds costs tens. When
					-- something was, the bounds are recorded unless they
					-- all start at 1 (then it was something else, which
					-- the bounds cannot mend).
					IF NOT NEW *= json_populate_record(NEW, json_build_object(col, new_row -> col)) THEN
						EXECUTE format('SELECT array_dims(($1).%%I)', col) INTO dim USING NEW;
						IF strpos(replace(dim, '[1:', ''), '[') > 0 THEN
							dims := coalesce(dims, '{}') || jsonb_build_object(col, dim);
						END IF;
					END IF;
				END LOOP;
			EXCEPTION WHEN OTHERS THEN
				-- The array could not be put back (a domain whose check
				-- depends on the bounds, an element type that does not
				-- read its JSON back) or the column is no array any more
				-- (its type changed since the install): ask the row for
				-- each array's bounds, and skip what is no array.
				dims := NULL;
				FOREACH col IN ARRAY arrs LOOP
					BEGIN
						EXECUTE format('SELECT array_dims(($1).%%I)', col) INTO dim USING NEW;
					EXCEPTION WHEN OTHERS THEN
						dim := NULL;
					END;
					IF strpos(replace(dim, '[1:', ''), '[') > 0 THEN
						dims := coalesce(dims, '{}') || jsonb_build_object(col, dim);
					END IF;
				END LOOP;
			END;
		END IF;
	END IF;
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %[1]s (tbl, op, data, nulls, dims) VALUES (TG_ARGV[0], 'I', new_row, nulls, dims);
		RETURN NULL;
	END IF;
	old_row := row_to_json(OLD);
	SELECT json_object_agg(k, old_row -> k) INTO old_key FROM unnest(TG_ARGV[1:json_at - 1]) AS k;
	IF TG_OP = 'UPDATE' THEN
		INSERT INTO %[1]s (tbl, op, key, data, nulls, dims) VALUES (TG_ARGV[0], 'U', old_key, new_row, nulls, dims);
	ELSE
		INSERT INTO %[1]s (tbl, op, key) VALUES (TG_ARGV[0], 'D', old_key);
	END IF;
	RETURN NULL;
END
`, log)},
		{name: truncateFunc, body: fmt.Sprintf(`
BEGIN
	-- TG_ARGV[0] is the table as sluice names it; a second argument marks
	-- the trigger of one of its partitions.
	IF TG_NARGS = 1 THEN
		INSERT INTO %s (tbl, op) VALUES (TG_ARGV[0], 'T');
	ELSIF NOT EXISTS (SELECT 1 FROM pg_partition_ancestors(TG_RELID) a WHERE a.relid = to_regclass(TG_ARGV[0])) THEN
		-- Detached from the table since: its TRUNCATE is not the table's.
		NULL;
	ELSIF (SELECT c.op FROM %s c WHERE c.xid = pg_current_xact_id() AND c.tbl = TG_ARGV[0] ORDER BY c.id DESC LIMIT 1) IS DISTINCT FROM 'T' THEN
		INSERT INTO %s (tbl, op, key) VALUES (TG_ARGV[0], 'P', json_build_object('partition', format('%%I.%%I', TG_TABLE_SCHEMA, TG_TABLE_NAME)));
	END IF;
	RETURN NULL;
END
`, log, log, log)},
		{name: logTruncFunc, body: fmt.Sprintf(`
BEGIN
	-- The rows are still there: a consumer loses changes when one of them
	-- is not covered by its position ("prev/cur/last[/xid]"). TRUNCATE
	-- waits for every writer, so none is still running. A new consumer
	-- may register only from a position taken after this transaction.
	UPDATE %s s SET lost = format('changelog %%s was truncated at %%s by transaction %%s, with changes the stream had not acknowledged',
			%s, now(), pg_current_xact_id())
		WHERE s.lost IS NULL AND EXISTS (SELECT 1 FROM %s c
			WHERE NOT pg_visible_in_snapshot(c.xid, split_part(s.pos, '/', 1)::pg_snapshot)
			AND NOT (split_part(s.pos, '/', 2) <> ''
				AND pg_visible_in_snapshot(c.xid, nullif(split_part(s.pos, '/', 2), '')::pg_snapshot)
				AND c.id <= split_part(s.pos, '/', 3)::bigint));
	INSERT INTO %s AS p (one, xid, at) VALUES (true, pg_current_xact_id(), now())
		ON CONFLICT (one) DO UPDATE SET xid = greatest(p.xid, excluded.xid), at = excluded.at;
	RETURN NULL;
END
`, ident(schema, consumerTable), quoteLiteral(ident(schema, changelogTable)), ident(schema, changelogTable), ident(schema, prunedTable))},
	}
}

// Install creates, in schema, the changelog, the consumer and pruned
// tables and sluice's trigger functions, and on each table the capture
// trigger and the TRUNCATE trigger (on the table and on each of its
// partitions). It is idempotent: what exists and is current is kept; a
// trigger whose arguments no longer match (the primary key or the nullable
// json and jsonb columns changed, or an older sluice created it without
// them) is replaced; an install by an older sluice gets what it lacks (the
// changelog's nulls column, the current functions). It runs in one
// transaction.
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
	missing, err := missingObjects(ctx, conn, schema, tables)
	if err != nil {
		return err
	} else if len(missing) == 0 {
		return nil
	}
	// Only what is missing: the changelog's ALTER TABLE locks it against
	// every captured write, and held while a trigger waits for an
	// application's transaction that then writes to the changelog, it
	// deadlocks with it (a partition created while sluice was stopped
	// lacks only its TRUNCATE trigger).
	withSchema := slices.ContainsFunc(missing, func(m string) bool {
		return strings.HasPrefix(m, "table ") || strings.HasPrefix(m, "function ") || strings.HasPrefix(m, "trigger ")
	})
	// The install locks each table in turn while the application's
	// transactions may hold one table and want another: PostgreSQL breaks
	// such a deadlock by failing one side, and when that is the install it
	// is retried, since the application's transaction has then gone ahead.
	for attempt := 1; ; attempt++ {
		err := install(ctx, conn, schema, tables, withSchema)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != deadlockDetected {
			return err
		}
		if attempt == installAttempts {
			return fmt.Errorf("%w (%d attempts, each failed by a deadlock with the application's transactions on these tables: retry at a quieter time, or run `sluice source install` then)", err, installAttempts)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// installAttempts bounds the retries of an install that PostgreSQL chose
// as a deadlock's victim.
const installAttempts = 5

const deadlockDetected = "40P01"

// install is one attempt of Install, in one transaction: sluice's tables,
// functions and the changelog's trigger when withSchema, then the tables'
// triggers.
func install(ctx context.Context, conn *pgx.Conn, schema string, tables []sluice.TableName, withSchema bool) error {
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
	if withSchema {
		for _, q := range tableSQL(schema) {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("install sluice changelog in schema %s: %w", schema, lockHint(err))
			}
		}
		for _, f := range functions(schema) {
			if _, err := tx.Exec(ctx, f.create(schema)); err != nil {
				return fmt.Errorf("install function %s.%s in schema %s: %w", schema, f.name, schema, lockHint(err))
			}
		}
		logOID, err := regclass(ctx, tx, ident(schema, changelogTable))
		if err != nil {
			return err
		}
		if err := ensureTrigger(ctx, tx, logOID, ident(schema, changelogTable), logTruncTrigger, ident(schema, logTruncFunc), nil, beforeTruncateEvent); err != nil {
			return err
		}
	}
	db := tx.Conn().Config().Database
	for _, t := range tables {
		info, err := lookupTable(ctx, tx, db, t)
		if err != nil {
			return err
		}
		qt := ident(t.Schema, t.Name)
		if err := ensureTrigger(ctx, tx, info.oid, qt, triggerName(schema), ident(schema, captureFunc), triggerArgs(t, info), rowEvent); err != nil {
			return err
		}
		if err := ensureTrigger(ctx, tx, info.oid, qt, truncateTriggerName(schema), ident(schema, truncateFunc), truncateArgs(t, false), truncateEvent); err != nil {
			return err
		}
		for _, part := range info.parts {
			if err := ensureTrigger(ctx, tx, part.oid, part.name, truncateTriggerName(schema), ident(schema, truncateFunc), truncateArgs(t, true), truncateEvent); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("install sluice capture in schema %s: commit: %w", schema, err)
	}
	return nil
}

// Trigger events, as CREATE TRIGGER spells them.
const (
	rowEvent            = "AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW"
	truncateEvent       = "AFTER TRUNCATE ON %s FOR EACH STATEMENT"
	beforeTruncateEvent = "BEFORE TRUNCATE ON %s FOR EACH STATEMENT"
)

// ensureTrigger creates trigger name (on relation rel, qualified as qrel)
// calling fn with args, or replaces one whose arguments differ or that is
// disabled.
func ensureTrigger(ctx context.Context, tx pgx.Tx, rel uint32, qrel, name, fn string, args []string, event string) error {
	have, found, err := lookupTrigger(ctx, tx, rel, name, fn)
	if err != nil {
		return err
	}
	if found && have.enabled() && slices.Equal(have.args, args) {
		return nil
	}
	if found {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DROP TRIGGER %s ON %s`, ident(name), qrel)); err != nil {
			return fmt.Errorf("replace trigger %s on %s: %w", name, qrel, lockHint(err))
		}
	}
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = quoteLiteral(a)
	}
	q := fmt.Sprintf(`CREATE TRIGGER %s `+event+` EXECUTE FUNCTION %s(%s)`, ident(name), qrel, fn, strings.Join(lits, ", "))
	if _, err := tx.Exec(ctx, q); err != nil {
		return fmt.Errorf("create trigger %s on %s: %w", name, qrel, lockHint(err))
	}
	return nil
}

func regclass(ctx context.Context, q queryer, name string) (uint32, error) {
	var oid *uint32
	if err := q.QueryRow(ctx, `SELECT to_regclass($1)::oid`, name).Scan(&oid); err != nil {
		return 0, fmt.Errorf("look up %s: %w", name, err)
	}
	if oid == nil {
		return 0, nil
	}
	return *oid, nil
}

// Uninstall drops the capture and TRUNCATE triggers from each table and
// its partitions (tables that do not exist are skipped). When no table in
// the database is captured into schema any more, it also drops the
// changelog, with every change not yet read, the consumer and pruned
// tables and sluice's functions, and then the schema if nothing else is
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
		oid, err := regclass(ctx, tx, ident(t.Schema, t.Name))
		if err != nil {
			return fmt.Errorf("uninstall capture trigger from %s: %w", t, err)
		}
		if oid == 0 {
			continue
		}
		parts, err := partitions(ctx, tx, oid)
		if err != nil {
			return err
		}
		drops := []string{
			fmt.Sprintf(`DROP TRIGGER IF EXISTS %s ON %s`, ident(triggerName(schema)), ident(t.Schema, t.Name)),
			fmt.Sprintf(`DROP TRIGGER IF EXISTS %s ON %s`, ident(truncateTriggerName(schema)), ident(t.Schema, t.Name)),
		}
		for _, p := range parts {
			drops = append(drops, fmt.Sprintf(`DROP TRIGGER IF EXISTS %s ON %s`, ident(truncateTriggerName(schema)), p.name))
		}
		for _, q := range drops {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("drop capture trigger on %s: %w", t, lockHint(err))
			}
		}
	}
	var left int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgfoid IN (to_regprocedure($1), to_regprocedure($2))`,
		ident(schema, captureFunc)+"()", ident(schema, truncateFunc)+"()").Scan(&left); err != nil {
		return fmt.Errorf("uninstall sluice capture from schema %s: %w", schema, err)
	}
	if left > 0 {
		return commit(ctx, tx, schema)
	}
	for _, q := range []string{
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, ident(schema, changelogTable)),
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, ident(schema, consumerTable)),
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, ident(schema, prunedTable)),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, ident(schema, captureFunc)),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, ident(schema, truncateFunc)),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, ident(schema, logTruncFunc)),
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
// sluice writes it into the changelog, then its primary key columns, then,
// when it has nullable json or jsonb columns or array columns, an empty
// argument and the nullable json and jsonb columns, and when it has array
// columns another empty argument and those (see functions). A table
// without array columns has the arguments an older sluice gave it, so an
// upgrade leaves its trigger alone.
func triggerArgs(t sluice.TableName, info *tableInfo) []string {
	args := append([]string{ident(t.Schema, t.Name)}, info.keyNames()...)
	js, arrs := info.jsonNullable(), info.arrayColumns()
	if len(js) > 0 || len(arrs) > 0 {
		args = append(append(args, ""), js...)
	}
	if len(arrs) > 0 {
		args = append(append(args, ""), arrs...)
	}
	return args
}

// splitCaptureArgs splits a capture trigger's arguments into its primary
// key columns, its nullable json columns and its array columns.
func splitCaptureArgs(args []string) (key, json, arrays []string) {
	if len(args) == 0 {
		return nil, nil, nil
	}
	args = args[1:]
	i := slices.Index(args, "")
	if i < 0 {
		return args, nil, nil
	}
	key, args = args[:i], args[i+1:]
	if i := slices.Index(args, ""); i >= 0 {
		return key, args[:i], args[i+1:]
	}
	return key, args, nil
}

// truncateArgs are the TRUNCATE trigger's arguments on a table, or on one
// of its partitions.
func truncateArgs(t sluice.TableName, partition bool) []string {
	if partition {
		return []string{ident(t.Schema, t.Name), "partition"}
	}
	return []string{ident(t.Schema, t.Name)}
}

// trigger is a trigger as pg_trigger has it.
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

// lookupTrigger finds trigger name on relation rel calling function fn
// (qualified, without its parentheses).
func lookupTrigger(ctx context.Context, q queryer, rel uint32, name, fn string) (trigger, bool, error) {
	var raw []byte
	var t trigger
	err := q.QueryRow(ctx, `SELECT tgargs, tgenabled::text FROM pg_trigger
		WHERE tgrelid = $1 AND tgname = $2 AND tgfoid = to_regprocedure($3)`,
		rel, name, fn+"()").Scan(&raw, &t.mode)
	if errors.Is(err, pgx.ErrNoRows) {
		return trigger{}, false, nil
	}
	if err != nil {
		return trigger{}, false, fmt.Errorf("look up trigger %s: %w", name, err)
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

// missingObjects lists what Install would create or replace: sluice's
// tables and functions, and the triggers on each table, using only catalog
// reads (no locks that writers would queue behind). It fails when a table
// is missing or has no primary key.
func missingObjects(ctx context.Context, q queryer, schema string, tables []sluice.TableName) ([]string, error) {
	tables = normalize(tables)
	var missing []string
	var have []bool
	err := q.QueryRow(ctx, `SELECT ARRAY[
			to_regclass($1) IS NOT NULL
				AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname IN ('at', 'nulls', 'dims') AND NOT attisdropped) = 3,
			(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname IN ('lost', 'partitions') AND NOT attisdropped) = 2,
			to_regclass($3) IS NOT NULL]`,
		ident(schema, changelogTable), ident(schema, consumerTable), ident(schema, prunedTable)).Scan(&have)
	if err != nil {
		return nil, fmt.Errorf("check sluice capture in schema %s: %w", schema, err)
	}
	for i, t := range []string{changelogTable, consumerTable, prunedTable} {
		if !have[i] {
			missing = append(missing, "table "+schema+"."+t)
		}
	}
	for _, f := range functions(schema) {
		var ok bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure($1) AND prosrc = $2)`,
			ident(schema, f.name)+"()", f.body).Scan(&ok); err != nil {
			return nil, fmt.Errorf("check sluice capture in schema %s: %w", schema, err)
		}
		if !ok {
			missing = append(missing, "function "+schema+"."+f.name+"()")
		}
	}
	logOID, err := regclass(ctx, q, ident(schema, changelogTable))
	if err != nil {
		return nil, err
	}
	if ok, err := triggerCurrent(ctx, q, logOID, logTruncTrigger, ident(schema, logTruncFunc), nil); err != nil {
		return nil, err
	} else if !ok {
		missing = append(missing, "trigger "+logTruncTrigger+" on "+schema+"."+changelogTable)
	}
	db := ""
	if c, ok := q.(interface{ Config() *pgx.ConnConfig }); ok {
		db = c.Config().Database
	}
	for _, t := range tables {
		info, err := lookupTable(ctx, q, db, t)
		if err != nil {
			return nil, err
		}
		if ok, err := triggerCurrent(ctx, q, info.oid, triggerName(schema), ident(schema, captureFunc), triggerArgs(t, info)); err != nil {
			return nil, err
		} else if !ok {
			missing = append(missing, "capture trigger "+triggerName(schema)+" on "+t.String())
		}
		if ok, err := triggerCurrent(ctx, q, info.oid, truncateTriggerName(schema), ident(schema, truncateFunc), truncateArgs(t, false)); err != nil {
			return nil, err
		} else if !ok {
			missing = append(missing, "TRUNCATE trigger "+truncateTriggerName(schema)+" on "+t.String())
		}
		for _, p := range info.parts {
			if ok, err := triggerCurrent(ctx, q, p.oid, truncateTriggerName(schema), ident(schema, truncateFunc), truncateArgs(t, true)); err != nil {
				return nil, err
			} else if !ok {
				missing = append(missing, partitionTriggerMissing+truncateTriggerName(schema)+" on "+p.name+" of "+t.String())
			}
		}
	}
	return missing, nil
}

// partitionTriggerMissing begins missingObjects' entry for a partition
// without sluice's TRUNCATE trigger.
const partitionTriggerMissing = "partition TRUNCATE trigger "

// triggerCurrent reports whether trigger name on rel exists, calls fn with
// args and is enabled.
func triggerCurrent(ctx context.Context, q queryer, rel uint32, name, fn string, args []string) (bool, error) {
	have, found, err := lookupTrigger(ctx, q, rel, name, fn)
	if err != nil {
		return false, err
	}
	return found && have.enabled() && slices.Equal(have.args, args), nil
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
