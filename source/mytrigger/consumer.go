package mytrigger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
)

// Several streams may read one changelog, each its own tables (PgQ's
// model): each registers as a consumer in sluice_consumer when its reader
// opens, records there the changelog id it has acknowledged, and a prune
// deletes only the ids every registered consumer has acknowledged. A prune
// deletes a prefix of the ids (every id below the minimum), and records
// the highest id it deleted in sluice_pruned, so whether a position can
// still be served is exact: it can while no id above it was pruned.

// DefaultStream is the consumer of a reader whose Config.Stream is empty,
// the daemon's default stream id.
const DefaultStream = "default"

// ErrPositionLost is the cause of an Open that fails because the changelog
// no longer holds changes the stream has not applied.
var ErrPositionLost = errors.New("the source's changelog no longer holds every change after the stream's position")

// ErrTableRewritten is the cause of a stream that stops because one of its
// tables was truncated or rebuilt: MySQL fires no trigger for that.
var ErrTableRewritten = errors.New("source table truncated or rebuilt without triggers firing")

// defaultPinWarnAfter is how long another consumer may hold changelog rows
// back before the reader says so.
const defaultPinWarnAfter = 30 * time.Minute

// checkEvery is how often Read checks the tables' and changelog's
// identities and that the stream is still registered. A table's InnoDB id
// is a catalog read; a TRUNCATE is noticed within this much time.
const checkEvery = time.Second

// changelogKey is the key of the changelog's own identity among a
// consumer's recorded table identities.
func (r *Reader) changelogKey() string {
	return logName(sluice.TableName{Schema: r.logDB, Name: ChangelogTable})
}

// encodeNames asks the server how InnoDB names each streamed table and the
// changelog (information_schema.INNODB_SYS_TABLES.NAME is "db/table" in
// the server's filename encoding, "db/table#P#p0" for a partition).
func (r *Reader) encodeNames(ctx context.Context) error {
	r.innoName = map[string][2]string{}
	names := append([]sluice.TableName{{Schema: r.logDB, Name: ChangelogTable}}, r.cfg.Tables...)
	for _, t := range names {
		var db, tbl string
		if err := r.db.QueryRowContext(ctx, `SELECT CAST(CONVERT(? USING filename) AS BINARY), CAST(CONVERT(? USING filename) AS BINARY)`,
			t.Schema, t.Name).Scan(&db, &tbl); err != nil {
			return fmt.Errorf("MySQL source %s: encode the InnoDB name of %s: %w", r.addr, t, err)
		}
		r.innoName[logName(t)] = [2]string{db, tbl}
	}
	return nil
}

// identities returns, for each streamed table and the changelog, its
// InnoDB table id, or its partitions' ids sorted and comma-separated.
// TRUNCATE, a TRUNCATE PARTITION and every rebuild (OPTIMIZE, ALTER …
// FORCE, a copying ALTER) give a table new ids; DML and instant ALTERs
// keep them (checked on MariaDB 10.11; CREATE_TIME, by contrast, survives
// a TRUNCATE). A table InnoDB does not know (dropped, renamed away) has
// none.
func (r *Reader) identities(ctx context.Context) (map[string]string, error) {
	byDB := map[string][]string{} // encoded database → keys
	for k, n := range r.innoName {
		byDB[n[0]] = append(byDB[n[0]], k)
	}
	ids := map[string][]uint64{}
	for db, keys := range byDB {
		rows, err := r.queryInnoTables(ctx, strings.ReplaceAll(db, "_", "!_")+"/%")
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var name string
			var id uint64
			if err := rows.Scan(&name, &id); err != nil {
				rows.Close()
				return nil, r.readErr(err)
			}
			for _, k := range keys {
				full := db + "/" + r.innoName[k][1]
				if name == full || (len(name) > len(full)+3 && name[:len(full)] == full && strings.EqualFold(name[len(full):len(full)+3], "#P#")) {
					ids[k] = append(ids[k], id)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, r.readErr(err)
		}
	}
	out := map[string]string{}
	for k := range r.innoName {
		v := ids[k]
		slices.Sort(v)
		s := make([]string, len(v))
		for i, id := range v {
			s[i] = strconv.FormatUint(id, 10)
		}
		out[k] = strings.Join(s, ",")
	}
	return out, nil
}

// queryInnoTables lists InnoDB's tables whose name matches pattern (LIKE,
// escape '!'): information_schema.INNODB_SYS_TABLES on MariaDB,
// INNODB_TABLES on MySQL 8.
func (r *Reader) queryInnoTables(ctx context.Context, pattern string) (*sql.Rows, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT NAME, TABLE_ID FROM information_schema.INNODB_SYS_TABLES WHERE NAME LIKE ? ESCAPE '!'`, pattern)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1109 { // unknown table: MySQL 8
		rows, err = r.db.QueryContext(ctx, `SELECT NAME, TABLE_ID FROM information_schema.INNODB_TABLES WHERE NAME LIKE ? ESCAPE '!'`, pattern)
	}
	if err != nil {
		if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1044 || me.Number == 1142) {
			return nil, fmt.Errorf("MySQL source %s: user %s cannot read InnoDB's table list, which the changelog reader needs to notice a TRUNCATE: GRANT PROCESS ON *.* TO the user: %w", r.addr, r.user, err)
		}
		return nil, r.readErr(err)
	}
	return rows, nil
}

// rewritten is the error for a table (or the changelog) whose identity
// changed from was to now.
func (r *Reader) rewritten(key, was, now string) error {
	if key == r.changelogKey() {
		return fmt.Errorf("stream %s: changelog %s.%s was truncated or recreated (its InnoDB table id changed from %s to %q), so changes the stream had not read are gone: "+
			"reload the target from a fresh copy of the source, then run `sluice source uninstall --stream-id %s` and start the stream from the copy's position: %w",
			r.stream, r.logDB, ChangelogTable, was, now, r.stream, ErrPositionLost)
	}
	var table sluice.TableName
	for _, t := range r.cfg.Tables {
		if logName(t) == key {
			table = t
		}
	}
	what := fmt.Sprintf("its InnoDB table id changed from %s to %s", was, now)
	if now == "" {
		what = fmt.Sprintf("InnoDB no longer has it (table id %s): dropped, or renamed away", was)
	}
	return &sluice.TableError{Table: table, Err: fmt.Errorf(
		"stream %s: source table %s was truncated or rebuilt (%s): TRUNCATE fires no trigger, so rows may have been removed on the source without a change reaching the target "+
			"(a rebuild by OPTIMIZE TABLE or a copying ALTER TABLE changes the id too, and cannot be told apart): "+
			"re-sync %s on the target from a fresh copy, then run `sluice source uninstall --stream-id %s` so the stream records the table anew, and restart it: %w",
		r.stream, table, what, table, r.stream, ErrTableRewritten)}
}

// register records the stream as a consumer of the changelog at the
// reader's start position, after checking that the changelog still holds
// every change after it and that no streamed table was truncated since the
// stream last ran.
func (r *Reader) register(ctx context.Context) error {
	if err := r.encodeNames(ctx); err != nil {
		return err
	}
	ids, err := r.identities(ctx)
	if err != nil {
		return err
	}
	for _, t := range r.cfg.Tables {
		if ids[logName(t)] == "" {
			return fmt.Errorf("source table %s is not in InnoDB's table list: the trigger reader needs InnoDB tables", t)
		}
	}
	fail := func(err error) error {
		return fmt.Errorf("register stream %s as a consumer of changelog %s.%s: %w", r.stream, r.logDB, ChangelogTable, err)
	}
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	pruned := ident(r.logDB, PrunedTable)
	if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO "+pruned+" (one) VALUES (1)"); err != nil {
		return fail(err)
	}
	// The row lock orders this registration with every prune: a prune
	// that starts after it sees this consumer.
	var prunedMax sql.Null[uint64]
	if err := tx.QueryRowContext(ctx, "SELECT max_id FROM "+pruned+" WHERE one = 1 FOR UPDATE").Scan(&prunedMax); err != nil {
		return fail(err)
	}
	var acked sql.Null[uint64]
	var stored sql.NullString
	err = tx.QueryRowContext(ctx, "SELECT acked, tables FROM "+ident(r.logDB, ConsumerTable)+" WHERE stream = ? FOR UPDATE", r.stream).Scan(&acked, &stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fail(err)
	}
	var next sql.Null[uint64]
	if err := tx.QueryRowContext(ctx, `SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		r.logDB, ChangelogTable).Scan(&next); err != nil {
		return fail(err)
	}
	at := r.start.last
	// The counter hands out ids above every id ever used; below the
	// position it has been reset (TRUNCATE), and new changes reuse ids the
	// stream thinks it has passed.
	if next.Valid && next.V <= at {
		return fmt.Errorf("stream %s cannot resume at changelog id %d: changelog %s.%s now hands out ids from %d, so it was truncated or recreated and changes after the position are gone: "+
			"reload the target from a fresh copy of the source and start the stream from the copy's position: %w",
			r.stream, at, r.logDB, ChangelogTable, next.V, ErrPositionLost)
	}
	if prunedMax.Valid && prunedMax.V > at {
		why := "other streams' acknowledgements let it be pruned before this stream registered"
		if acked.Valid && acked.V > at {
			why = fmt.Sprintf("the stream itself had acknowledged changelog id %d, so the target once held more than the position says (restored from a backup?)", acked.V)
		}
		return fmt.Errorf("stream %s cannot resume at changelog id %d: changelog %s.%s was pruned up to id %d (%s), so changes after the position are gone: "+
			"reload the target from a fresh copy of the source and start the stream from the copy's position: %w",
			r.stream, at, r.logDB, ChangelogTable, prunedMax.V, why, ErrPositionLost)
	}
	if stored.Valid && stored.String != "" {
		var was map[string]string
		if err := json.Unmarshal([]byte(stored.String), &was); err != nil {
			return fail(fmt.Errorf("recorded table identities %q: %w", stored.String, err))
		}
		keys := make([]string, 0, len(ids))
		for k := range ids {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if w, ok := was[k]; ok && w != ids[k] {
				return r.rewritten(k, w, ids[k])
			}
		}
	}
	rec, err := json.Marshal(ids)
	if err != nil {
		return fail(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+ident(r.logDB, ConsumerTable)+` (stream, acked, tables) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE acked = VALUES(acked), tables = VALUES(tables)`, r.stream, at, string(rec)); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	r.ids = ids
	return nil
}

// checkSource looks, at most every checkEvery, for a streamed table or the
// changelog truncated or rebuilt, and for the stream's consumer record
// removed, since the reader opened.
func (r *Reader) checkSource(ctx context.Context) error {
	if time.Since(r.lastCheck) < checkEvery {
		return nil
	}
	ids, err := r.identities(ctx)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(r.ids))
	for k := range r.ids {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if ids[k] != r.ids[k] {
			return r.rewritten(k, r.ids[k], ids[k])
		}
	}
	var n int
	if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+ident(r.logDB, ConsumerTable)+" WHERE stream = ?", r.stream).Scan(&n); err != nil {
		return r.readErr(err)
	}
	if n == 0 {
		return fmt.Errorf("stream %s: its consumer record in %s.%s was removed while it ran (`sluice source uninstall --stream-id`?), so other streams may prune changes it has not read: "+
			"restart the stream, which registers again and checks that its position can still be served", r.stream, r.logDB, ConsumerTable)
	}
	r.lastCheck = time.Now()
	return nil
}

// consumerAge is another consumer as a prune saw it.
type consumerAge struct {
	stream string
	acked  uint64
	idle   time.Duration // since it last acknowledged (or registered)
}

// prune records that the stream has acknowledged last and deletes, in
// chunks, the changelog ids every consumer has acknowledged. It returns
// how many rows it deleted and the other consumers holding rows back.
func (r *Reader) prune(ctx context.Context, last uint64) (int64, []consumerAge, error) {
	var total int64
	var behind []consumerAge
	for first := true; ; first = false {
		n, b, err := r.pruneChunk(ctx, last, first)
		total += n
		if first {
			behind = b
		}
		if err != nil || n < pruneChunk {
			return total, behind, err
		}
	}
}

// pruneChunk deletes up to pruneChunk ids at or below every consumer's
// acknowledged id, in one READ COMMITTED transaction that holds the pruned
// row's lock (see register). With record it first raises the stream's own
// acknowledged id to last. It deletes by listed ids: a range delete would
// scan, and wait for, the first row above the bound, which may belong to a
// transaction still running.
func (r *Reader) pruneChunk(ctx context.Context, last uint64, record bool) (int64, []consumerAge, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	pruned, consumers, log := ident(r.logDB, PrunedTable), ident(r.logDB, ConsumerTable), ident(r.logDB, ChangelogTable)
	var prunedMax sql.Null[uint64]
	if err := tx.QueryRowContext(ctx, "SELECT max_id FROM "+pruned+" WHERE one = 1 FOR UPDATE").Scan(&prunedMax); err != nil {
		return 0, nil, err
	}
	if record {
		res, err := tx.ExecContext(ctx, "UPDATE "+consumers+" SET acked = GREATEST(acked, ?), acked_at = NOW(6) WHERE stream = ?", last, r.stream)
		if err != nil {
			return 0, nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, nil, err
		} else if n == 0 {
			return 0, nil, fmt.Errorf("stream %s has no consumer record in %s.%s any more (unregistered while it ran?): nothing pruned; restart the stream to register it again",
				r.stream, r.logDB, ConsumerTable)
		}
	}
	rows, err := tx.QueryContext(ctx, "SELECT stream, acked, TIMESTAMPDIFF(MICROSECOND, COALESCE(acked_at, registered_at), NOW(6)) FROM "+consumers)
	if err != nil {
		return 0, nil, err
	}
	bound := last
	var behind []consumerAge
	for rows.Next() {
		var c consumerAge
		var us int64
		if err := rows.Scan(&c.stream, &c.acked, &us); err != nil {
			rows.Close()
			return 0, nil, err
		}
		c.idle = time.Duration(us) * time.Microsecond
		bound = min(bound, c.acked)
		if c.stream != r.stream && c.acked < last {
			behind = append(behind, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	rows, err = tx.QueryContext(ctx, fmt.Sprintf(`SELECT id FROM %s WHERE id <= ? ORDER BY id LIMIT %d`, log, pruneChunk), bound)
	if err != nil {
		return 0, nil, err
	}
	var ids []string
	var top uint64
	for rows.Next() {
		if err := rows.Scan(&top); err != nil {
			rows.Close()
			return 0, nil, err
		}
		ids = append(ids, strconv.FormatUint(top, 10))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if len(ids) > 0 {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE id IN (%s)`, log, strings.Join(ids, ","))); err != nil {
			return 0, nil, err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+pruned+" SET max_id = GREATEST(COALESCE(max_id, 0), ?), at = NOW(6) WHERE one = 1", top); err != nil {
			return 0, nil, err
		}
	}
	return int64(len(ids)), behind, tx.Commit()
}

// warnPinned says which other consumers hold changelog rows back and have
// not acknowledged anything for PinWarnAfter, once per PinWarnAfter each.
func (r *Reader) warnPinned(behind []consumerAge) {
	for _, c := range behind {
		if c.idle < r.cfg.PinWarnAfter || time.Since(r.warned[c.stream]) < r.cfg.PinWarnAfter {
			continue
		}
		r.warned[c.stream] = time.Now()
		r.log.Warn("another stream's consumer pins the changelog: its rows are kept until it acknowledges them",
			"consumer", c.stream, "acknowledged", c.acked, "idle", c.idle.Round(time.Second).String(),
			"fix", fmt.Sprintf("start stream %s, or if it is gone run `sluice source uninstall --stream-id %s`", c.stream, c.stream))
	}
}

// Unregister removes stream's consumer record from the changelog in db's
// database, so that the changelog is no longer kept for it (for `sluice
// source uninstall --stream-id`). The stream's next reader registers anew,
// and opens only if nothing after its position was pruned meanwhile. It is
// a no-op when the stream or the consumer table does not exist.
func Unregister(ctx context.Context, db *sql.DB, stream string) error {
	if stream == "" {
		stream = DefaultStream
	}
	conn, logDB, err := session(ctx, db)
	if err != nil {
		return fmt.Errorf("unregister stream %s: %w", stream, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "DELETE FROM "+ident(logDB, ConsumerTable)+" WHERE stream = ?", stream); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // no such table: nothing registered
			return nil
		}
		return fmt.Errorf("unregister stream %s from changelog %s.%s: %w", stream, logDB, ChangelogTable, lockHint(err))
	}
	return nil
}
