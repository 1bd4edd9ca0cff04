package mytrigger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
)

// ChangelogTable is the changelog's name, in the connection's database.
const ChangelogTable = "sluice_changelog"

// Tables next to the changelog that let several streams read it (see
// consumer.go): ConsumerTable has a row per stream, with the changelog id
// it has acknowledged; PrunedTable one row, the highest id ever pruned.
const (
	ConsumerTable = "sluice_consumer"
	PrunedTable   = "sluice_pruned"
)

// lockWaitSeconds bounds how long Install waits for a metadata lock: a
// CREATE TRIGGER waits behind every open transaction that touched the
// table, and every later writer queues behind the waiting CREATE.
const lockWaitSeconds = 3

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func ident(parts ...string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = quoteIdent(p)
	}
	return strings.Join(q, ".")
}

// quoteLiteral quotes s as a string literal whatever the sql_mode
// (NO_BACKSLASH_ESCAPES or not): only quotes and backslashes need care.
func quoteLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// event is one of the three capture triggers of a table.
type event struct {
	suffix, name, op string
}

var events = []event{{"ai", "INSERT", "I"}, {"au", "UPDATE", "U"}, {"ad", "DELETE", "D"}}

// triggerName names a table's capture trigger for an event, within the 64
// characters MySQL allows: sluice_<table>_ai, with a hash of the full name
// when the table's name is too long.
func triggerName(table string, e event) string {
	n := "sluice_" + table + "_" + e.suffix
	if len(n) <= 64 {
		return n
	}
	sum := sha256.Sum256([]byte(table))
	prefix := table
	for len("sluice_"+prefix+"_12345678_"+e.suffix) > 64 {
		_, size := lastRune(prefix)
		prefix = prefix[:len(prefix)-size]
	}
	return "sluice_" + prefix + "_" + hex.EncodeToString(sum[:4]) + "_" + e.suffix
}

func lastRune(s string) (rune, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return rune(s[i]), len(s) - i
		}
	}
	return 0, len(s)
}

// logName is how the changelog's tbl column names a table.
func logName(t sluice.TableName) string { return ident(t.Schema, t.Name) }

// jsonImage is the JSON_OBJECT capturing the given columns of alias.
func jsonImage(info *tableInfo, alias string, cols []int) string {
	parts := make([]string, 0, 2*len(cols))
	for _, i := range cols {
		name := info.table.Columns[i].Name
		parts = append(parts, quoteLiteral(name), info.captures[i].expr(alias, name))
	}
	return "JSON_OBJECT(" + strings.Join(parts, ", ") + ")"
}

// triggerBody is the statement a capture trigger runs: one INSERT into the
// changelog with the new row image (insert, update) and the old primary key
// (update, delete). It depends on the table's columns and their types,
// so Install regenerates it, and Open refuses a stale one, when they
// change.
func triggerBody(logDB string, info *tableInfo, e event) string {
	all := make([]int, len(info.table.Columns))
	for i := range all {
		all[i] = i
	}
	log := ident(logDB, ChangelogTable)
	name := quoteLiteral(logName(info.table.Name))
	switch e.op {
	case "I":
		return fmt.Sprintf("INSERT INTO %s (tbl, op, d) VALUES (%s, 'I', %s)", log, name, jsonImage(info, "NEW", all))
	case "U":
		// MariaDB fires AFTER UPDATE triggers for rows that UPDATE IGNORE
		// left alone on a duplicate key (checked on 10.11), which would
		// capture a change that never happened. So the trigger captures an
		// update only if the row now holds the new image and, when the key
		// changed, no row holds the old key any more. It costs one or two
		// primary-key lookups per updated row.
		// Values are compared with "a = b OR both NULL", not "<=>": MariaDB
		// 10.11 finds a TIMESTAMP(6) column <=> NEW of the same value false
		// inside a trigger, while = is true.
		tbl := ident(info.table.Name.Schema, info.table.Name.Name)
		eq := func(a, b string) string { return fmt.Sprintf("(%s = %s OR (%s IS NULL AND %s IS NULL))", a, b, a, b) }
		var same, newKey, oldKey, keyKept []string
		for i, c := range info.table.Columns {
			q := quoteIdent(c.Name)
			same = append(same, eq("sluice_cur."+q, "NEW."+q))
			if slices.Contains(info.table.Key, i) {
				newKey = append(newKey, fmt.Sprintf("sluice_cur.%s = NEW.%s", q, q))
				oldKey = append(oldKey, fmt.Sprintf("sluice_old.%s = OLD.%s", q, q))
				keyKept = append(keyKept, eq("OLD."+q, "NEW."+q))
			}
		}
		return fmt.Sprintf("INSERT INTO %s (tbl, op, k, d) SELECT %s, 'U', %s, %s FROM DUAL "+
			"WHERE EXISTS (SELECT 1 FROM %s AS sluice_cur WHERE %s AND %s) "+
			"AND ((%s) OR NOT EXISTS (SELECT 1 FROM %s AS sluice_old WHERE %s))",
			log, name, jsonImage(info, "OLD", info.table.Key), jsonImage(info, "NEW", all),
			tbl, strings.Join(newKey, " AND "), strings.Join(same, " AND "),
			strings.Join(keyKept, " AND "), tbl, strings.Join(oldKey, " AND "))
	}
	return fmt.Sprintf("INSERT INTO %s (tbl, op, k) VALUES (%s, 'D', %s)", log, name, jsonImage(info, "OLD", info.table.Key))
}

// changelogSQL creates the changelog. id orders it (see the package
// documentation for why reading in id order is safe); tbl names the source
// table; k is the old primary key and d the new row image, as JSON text
// (LONGTEXT, not the JSON type, which MySQL would normalise); at is when
// the change was captured (the writing statement's start).
func changelogSQL(logDB string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	tbl VARCHAR(300) NOT NULL,
	op CHAR(1) NOT NULL,
	k LONGTEXT NULL,
	d LONGTEXT NULL,
	at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, ident(logDB, ChangelogTable))
}

// consumerSQL creates the consumer table: a row per stream reading the
// changelog. acked is the changelog id the stream has acknowledged (or the
// one it opened at): Ack prunes only ids every stream has passed. tables
// holds, as a JSON object, the InnoDB table id(s) of each table the stream
// reads and of the changelog when it registered, so that a TRUNCATE or
// rebuild while the stream was down is noticed when it opens again.
func consumerSQL(logDB string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	stream VARCHAR(255) NOT NULL,
	acked BIGINT UNSIGNED NOT NULL,
	tables LONGTEXT NULL,
	registered_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	acked_at TIMESTAMP(6) NULL,
	PRIMARY KEY (stream)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, ident(logDB, ConsumerTable))
}

// prunedSQL creates the pruned table's one row: max_id is the highest
// changelog id any stream's prune deleted (NULL: none known; a changelog
// from before this table was pruned by its single reader only), so that a
// stream opening at a lower position knows it cannot be served. Every
// prune and every registration locks the row, which orders them.
func prunedSQL(logDB string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	one TINYINT UNSIGNED NOT NULL,
	max_id BIGINT UNSIGNED NULL,
	at TIMESTAMP(6) NULL,
	PRIMARY KEY (one)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, ident(logDB, PrunedTable))
}

// trigger is a capture trigger as information_schema.TRIGGERS has it.
type trigger struct {
	table, timing, event string
	// body is NULL when the user may not see it (no TRIGGER privilege).
	body sql.NullString
}

// lookupTriggers finds a table's capture triggers, by event suffix.
func lookupTriggers(ctx context.Context, q queryer, t sluice.TableName) (map[string]trigger, error) {
	out := map[string]trigger{}
	for _, e := range events {
		var tr trigger
		err := q.QueryRowContext(ctx, `SELECT EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_STATEMENT
			FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME = ?`,
			t.Schema, triggerName(t.Name, e)).Scan(&tr.table, &tr.timing, &tr.event, &tr.body)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look up capture trigger %s on %s: %w", triggerName(t.Name, e), t, err)
		}
		out[e.suffix] = tr
	}
	return out, nil
}

// current reports whether tr is the capture trigger sluice would create
// now for event e of the table. A body the user may not see (NULL) is
// taken as current: only the trigger's existence can be checked then.
func current(tr trigger, ok bool, logDB string, info *tableInfo, e event) bool {
	return ok && tr.table == info.table.Name.Name && tr.timing == "AFTER" && tr.event == e.name &&
		(!tr.body.Valid || strings.TrimSpace(tr.body.String) == triggerBody(logDB, info, e))
}

var capturedRe = regexp.MustCompile("(?:NEW|OLD)\\.`((?:[^`]|``)*)`")

// capturedColumns lists the columns a trigger body captures, for messages.
func capturedColumns(body string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range capturedRe.FindAllStringSubmatch(body, -1) {
		n := strings.ReplaceAll(m[1], "``", "`")
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// session is a connection set up for installing: utf8mb4 (a trigger keeps
// its creator's character set for its literals) and short lock waits.
func session(ctx context.Context, db *sql.DB) (*sql.Conn, string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, "", err
	}
	var logDB sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&logDB); err != nil {
		conn.Close()
		return nil, "", err
	}
	if !logDB.Valid || logDB.String == "" {
		conn.Close()
		return nil, "", errors.New("the connection has no database: name the database that holds (or will hold) sluice_changelog in the connection string")
	}
	for _, s := range []string{
		"SET NAMES utf8mb4",
		// quoteLiteral doubles backslashes.
		"SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '')",
		fmt.Sprintf("SET SESSION lock_wait_timeout = %d", lockWaitSeconds),
		fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", lockWaitSeconds),
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			conn.Close()
			return nil, "", fmt.Errorf("%s: %w", s, err)
		}
	}
	return conn, logDB.String, nil
}

// normalize fills the defaults of a table list: the connection's database.
func normalize(tables []sluice.TableName, db string) []sluice.TableName {
	out := make([]sluice.TableName, len(tables))
	for i, t := range tables {
		if t.Schema == "" {
			t.Schema = db
		}
		out[i] = t
	}
	return out
}

// Install creates the changelog sluice_changelog in the connection's
// database, with the consumer and pruned tables beside it, and the three
// capture triggers (AFTER INSERT, UPDATE, DELETE: sluice_<table>_ai, _au,
// _ad) on each table; tables with an empty Schema are in the connection's
// database. On an install from before the consumer table it adds the
// consumer and pruned tables and leaves everything else as it is.
//
// It is idempotent and careful with a busy source: it first checks, with
// catalog reads only, and changes nothing when everything is current. A
// trigger that is missing or stale (the table's columns, their types or
// its primary key changed since it was created) is (re)created with the
// table locked for writing (LOCK TABLES), so that no write slips between
// dropping the old triggers and creating the new ones, and a table's
// three triggers appear together. Lock waits are bounded to a few seconds:
// rather than make the application's writes queue behind it, Install
// fails and says so.
func Install(ctx context.Context, db *sql.DB, tables []sluice.TableName) error {
	conn, logDB, err := session(ctx, db)
	if err != nil {
		return fmt.Errorf("install sluice capture: %w", err)
	}
	defer conn.Close()
	tables = normalize(tables, logDB)
	// Concurrent installs would race on DROP/CREATE TRIGGER.
	lockName := "sluice mytrigger install " + logDB
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 30)`, lockName).Scan(&got); err != nil || got.Int64 != 1 {
		return fmt.Errorf("install sluice capture in database %s: another install is running (GET_LOCK): %v", logDB, err)
	}
	defer conn.ExecContext(context.Background(), `SELECT RELEASE_LOCK(?)`, lockName) //nolint:errcheck
	// CREATE TABLE IF NOT EXISTS would still wait for a metadata lock on
	// a table in use: create only what is missing.
	for _, t := range []struct{ name, ddl string }{
		{ChangelogTable, changelogSQL(logDB)}, {ConsumerTable, consumerSQL(logDB)}, {PrunedTable, prunedSQL(logDB)},
	} {
		exists, err := tableExists(ctx, conn, logDB, t.name)
		if err != nil {
			return err
		}
		if !exists {
			if _, err := conn.ExecContext(ctx, t.ddl); err != nil {
				return fmt.Errorf("create %s.%s: %w", logDB, t.name, lockHint(err))
			}
		}
	}
	var rows int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+ident(logDB, PrunedTable)).Scan(&rows); err != nil {
		return fmt.Errorf("read %s.%s: %w", logDB, PrunedTable, err)
	}
	if rows == 0 {
		if _, err := conn.ExecContext(ctx, "INSERT IGNORE INTO "+ident(logDB, PrunedTable)+" (one) VALUES (1)"); err != nil {
			return fmt.Errorf("fill %s.%s: %w", logDB, PrunedTable, err)
		}
	}
	for _, t := range tables {
		info, err := lookupTable(ctx, conn, t)
		if err != nil {
			return err
		}
		have, err := lookupTriggers(ctx, conn, t)
		if err != nil {
			return err
		}
		stale := false
		for _, e := range events {
			tr, ok := have[e.suffix]
			stale = stale || !current(tr, ok, logDB, info, e)
		}
		if !stale {
			continue
		}
		if err := replaceTriggers(ctx, conn, logDB, info, have); err != nil {
			return err
		}
	}
	return nil
}

// replaceTriggers drops a table's existing capture triggers and creates
// current ones, all under LOCK TABLES ... WRITE.
func replaceTriggers(ctx context.Context, conn *sql.Conn, logDB string, info *tableInfo, have map[string]trigger) error {
	t := info.table.Name
	qt := ident(t.Schema, t.Name)
	// A trigger of this name on another table went with a table renamed
	// away (RENAME TABLE t TO t_old, t_new TO t): the new t takes it over,
	// which needs that table locked too.
	locks := []string{qt + " WRITE"}
	for _, tr := range have {
		if l := ident(t.Schema, tr.table) + " WRITE"; tr.table != t.Name && !slices.Contains(locks, l) {
			locks = append(locks, l)
		}
	}
	if _, err := conn.ExecContext(ctx, "LOCK TABLES "+strings.Join(locks, ", ")); err != nil {
		return fmt.Errorf("install capture triggers on %s: lock the table: %w", t, lockHint(err))
	}
	defer conn.ExecContext(context.Background(), "UNLOCK TABLES") //nolint:errcheck
	for _, e := range events {
		if _, ok := have[e.suffix]; ok {
			if _, err := conn.ExecContext(ctx, "DROP TRIGGER IF EXISTS "+ident(t.Schema, triggerName(t.Name, e))); err != nil {
				return fmt.Errorf("replace capture trigger %s on %s: %w", triggerName(t.Name, e), t, lockHint(err))
			}
		}
	}
	for _, e := range events {
		q := fmt.Sprintf("CREATE TRIGGER %s AFTER %s ON %s FOR EACH ROW %s",
			ident(t.Schema, triggerName(t.Name, e)), e.name, qt, triggerBody(logDB, info, e))
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create capture trigger %s on %s: %w", triggerName(t.Name, e), t, lockHint(err))
		}
	}
	if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		return fmt.Errorf("install capture triggers on %s: unlock: %w", t, err)
	}
	return nil
}

// Uninstall drops the capture triggers from each table (tables that do not
// exist are skipped). When no capture trigger writes to the changelog any
// more, it drops the changelog too, with every change not yet read, and
// the consumer and pruned tables. So
// uninstalling every table removes everything sluice created; uninstalling
// some keeps the changelog for the others.
func Uninstall(ctx context.Context, db *sql.DB, tables []sluice.TableName) error {
	conn, logDB, err := session(ctx, db)
	if err != nil {
		return fmt.Errorf("uninstall sluice capture: %w", err)
	}
	defer conn.Close()
	tables = normalize(tables, logDB)
	for _, t := range tables {
		for _, e := range events {
			if _, err := conn.ExecContext(ctx, "DROP TRIGGER IF EXISTS "+ident(t.Schema, triggerName(t.Name, e))); err != nil {
				var me *mysql.MySQLError
				if errors.As(err, &me) && me.Number == 1049 { // unknown database
					break
				}
				return fmt.Errorf("drop capture trigger %s on %s: %w", triggerName(t.Name, e), t, lockHint(err))
			}
		}
	}
	var left int
	pattern := "%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(ident(logDB, ChangelogTable)) + "%"
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TRIGGERS
		WHERE TRIGGER_NAME LIKE 'sluice\_%' AND ACTION_STATEMENT LIKE ?`, pattern).Scan(&left); err != nil {
		return fmt.Errorf("uninstall sluice capture from database %s: %w", logDB, err)
	}
	if left > 0 {
		return nil
	}
	for _, t := range []string{ChangelogTable, ConsumerTable, PrunedTable} {
		if _, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+ident(logDB, t)); err != nil {
			return fmt.Errorf("drop %s.%s: %w", logDB, t, lockHint(err))
		}
	}
	return nil
}

// tableExists looks a table up in information_schema, which takes no lock.
func tableExists(ctx context.Context, q queryer, db, name string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		db, name).Scan(&n); err != nil {
		return false, fmt.Errorf("look up %s.%s: %w", db, name, err)
	}
	return n > 0, nil
}

// lockHint explains a lock wait timeout during install.
func lockHint(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == 1205 || me.Number == 3572) {
		return fmt.Errorf("%w: installing capture needs a brief exclusive metadata lock that a long-running transaction on the source holds; "+
			"sluice gave up after %d s rather than make the application's writes queue behind it: retry when the transaction has finished "+
			"(see information_schema.innodb_trx), or run `sluice source install` at a quiet time", err, lockWaitSeconds)
	}
	return err
}
