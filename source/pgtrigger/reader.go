// Package pgtrigger reads row changes from PostgreSQL through triggers and
// a changelog table, for sources where logical replication is not allowed.
//
// Install puts a changelog table and an AFTER ROW trigger on each selected
// table into a schema of sluice's own ("sluice" by default). Every insert,
// update and delete appends the row image (row_to_json) and the old primary
// key to the changelog, stamped with the writing transaction's id. The
// image writes SQL NULL and the JSON value null alike, so for the nullable
// json and jsonb columns it shows as null the trigger also records which
// one each is (the changelog's nulls column; see functions); the image
// writes every array as starting at 1, so for arrays that do not the
// trigger records their bounds (the changelog's dims column).
//
// The Reader reads the changelog in snapshot windows, as PgQ does: it takes
// pg_current_snapshot() S and reads the rows whose transaction is visible
// in S but not in the previous snapshot, i.e. the transactions that
// committed between the two. Windows follow commit order, and inside a
// window changelog id order follows each row's modification order (a
// writer holds the row lock until it commits, so whoever modifies the row
// next gets a later id). Ordering by id alone, or by id below the oldest
// running xid, skips the changes of long transactions or misorders them.
//
// A reader started without a position reads every row in the changelog:
// the target must hold the source rows as of the install, every change made
// after it is streamed. PositionAt gives the position that matches a copy
// taken in a REPEATABLE READ transaction, for an initial copy made after
// the install.
//
// A TRUNCATE is captured by a statement-level trigger and handed out in
// order as an OpTruncate change. A TRUNCATE of a single partition of a
// streamed table stops the stream with ErrPartialTruncate instead: the
// target cannot truncate part of a table.
//
// Change positions carry the writing transaction's id, so that Covers can
// tell exactly whether one position covers another read's change. When
// windows advance with no change of the streamed tables, Read hands out
// OpProgress changes so that a quiet stream's position keeps up.
//
// Several streams may read one changelog (see consumer.go): each
// registers as a consumer when its reader opens, Ack records the stream's
// position there, and prunes only the rows every consumer has
// acknowledged. A reader opening at a position whose changes were pruned,
// or after the changelog was truncated, fails with ErrPositionLost.
//
// Not captured: schema changes (restart sluice after one so it describes
// the tables again), rows deleted from the changelog by hand (not
// TRUNCATE), and a TRUNCATE of a partition attached after the install
// (reinstall after attaching one).
package pgtrigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// Config configures a Reader.
type Config struct {
	// Tables to stream; an empty Schema means "public".
	Tables []sluice.TableName
	// PollInterval is how long Read waits for changes before it returns an
	// empty slice. Default 200ms.
	PollInterval time.Duration
	// Schema owns sluice's changelog and capture function on the source.
	// Default "sluice".
	Schema string
	// Install makes Open install whatever changelog or trigger is missing;
	// without it Open fails and says how to install them.
	Install bool
	Logger  *slog.Logger
	// Stream names the stream the reader reads for: its consumer record
	// on the source, which keeps the changelog rows it has not
	// acknowledged. Default "default" (DefaultStream).
	Stream string
	// ProgressInterval is the least time between two OpProgress changes,
	// which Read hands out when windows advance with no change of the
	// streamed tables. Default 5s.
	ProgressInterval time.Duration
	// PinWarnAfter is how long another stream's consumer may hold back
	// changelog rows this stream has acknowledged, without acknowledging
	// anything itself, before the reader warns about it. Default 30m.
	PinWarnAfter time.Duration
}

const (
	defaultPollInterval = 200 * time.Millisecond
	// defaultProgressInterval spaces OpProgress changes: each one costs
	// the stream a checkpoint and the source an acknowledgement.
	defaultProgressInterval = 5 * time.Second
	// pollEvery is how often Read looks for new changes while it waits.
	pollEvery = 50 * time.Millisecond
	// defaultPruneEvery rate-limits changelog pruning: deleting is cheap
	// per row but not free, and Ack may be called for every batch.
	defaultPruneEvery = 2 * time.Second
)

// Reader streams changes from the changelog. Read and Ack may be called
// from different goroutines: Ack prunes on a connection of its own.
type Reader struct {
	cfg     Config
	log     *slog.Logger
	connCfg *pgx.ConnConfig
	addr    string
	tables  []*sluice.Table
	infos   []*tableInfo
	names   []string // changelog tbl values, aligned with tables
	query   string
	hasJSON bool
	stream  string
	start   position

	mu   sync.Mutex // serialises Read and guards the fields below
	conn *pgx.Conn
	pos  position
	// lastOut is the newest snapshot of the last position handed out (a
	// change's cur, a progress's prev, or the start's); lastProgress when
	// Read last handed out an OpProgress.
	lastOut      snapshot
	lastProgress time.Time
	// legacyNulls holds the json columns already warned about: a row image
	// showed null in them with no record of which null it was, see fixJSON.
	legacyNulls map[string]bool

	// lastPartCheck is when Read last compared the partitions of the
	// partitioned tables with the stream's record (see partitions.go).
	lastPartCheck time.Time

	ackMu      sync.Mutex // guards the fields below
	ackConn    *pgx.Conn
	lastPrune  time.Time
	pending    *position
	pruneEvery time.Duration
	warned     map[string]time.Time // consumers warned about, see warnPinned
}

var _ source.Reader = (*Reader)(nil)

// Open connects to the source, checks every table and its capture trigger
// (installing what is missing when cfg.Install is set) and returns a Reader
// that resumes after from, or reads the whole changelog when from is zero.
func Open(ctx context.Context, connString string, cfg Config, from sluice.Position) (*Reader, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = defaultProgressInterval
	}
	if cfg.PinWarnAfter <= 0 {
		cfg.PinWarnAfter = defaultPinWarnAfter
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("pgtrigger source: no tables configured")
	}
	cfg.Tables = normalize(cfg.Tables)
	for i, t := range cfg.Tables {
		if slices.Contains(cfg.Tables[:i], t) {
			return nil, fmt.Errorf("pgtrigger source: table %s is listed twice", t)
		}
	}
	pos, err := parsePosition(from)
	if err != nil {
		return nil, err
	}
	connCfg, err := readerConnConfig(connString)
	if err != nil {
		return nil, err
	}
	r := &Reader{
		cfg:          cfg,
		log:          cfg.Logger.With("source", "pgtrigger", "database", connCfg.Database, "stream", cfg.Stream),
		connCfg:      connCfg,
		addr:         net.JoinHostPort(connCfg.Host, fmt.Sprint(connCfg.Port)),
		stream:       cfg.Stream,
		start:        pos,
		pos:          pos,
		lastOut:      pos.outer(),
		lastProgress: time.Now(),
		pruneEvery:   defaultPruneEvery,
		warned:       map[string]time.Time{},
		legacyNulls:  map[string]bool{},
	}
	if r.conn, err = r.connect(ctx); err != nil {
		return nil, err
	}
	if err := r.check(ctx); err != nil {
		r.conn.Close(context.Background())
		return nil, err
	}
	if err := r.register(ctx); err != nil {
		r.conn.Close(context.Background())
		return nil, err
	}
	// A partition that changed while no reader ran is written into the
	// changelog before the stream reads that far.
	if err := r.checkPartitions(ctx); err != nil {
		r.conn.Close(context.Background())
		return nil, err
	}
	r.buildQueries()
	r.log.Info("pgtrigger reader open", "tables", len(r.tables), "schema", cfg.Schema, "from", r.pos.sluice().String())
	return r, nil
}

// readerConnConfig parses the connection string and pins the session
// settings that decide how values are rendered as text, so Value.Text is
// the same whatever the server, database or role defaults say: timestamptz
// text depends on TimeZone (UTC gives one spelling for an instant), date
// and timestamp text on DateStyle (ISO is unambiguous to parse back),
// interval text on IntervalStyle (postgres style parses back under every
// style but sql_standard's sign rules), float text on extra_float_digits (3
// gives the shortest text that reads back as the same value), bytea text
// on bytea_output (hex).
func readerConnConfig(connString string) (*pgx.ConnConfig, error) {
	c, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgtrigger source: parse connection string: %w", err)
	}
	for k, v := range SessionSettings() {
		c.RuntimeParams[k] = v
	}
	if c.RuntimeParams["application_name"] == "" {
		c.RuntimeParams["application_name"] = "sluice-pgtrigger"
	}
	return c, nil
}

// SessionSettings are the settings the reader's session runs with; a
// value's text is what `col::text` gives under them.
func SessionSettings() map[string]string { return keyrange.PGSettings() }

// connect opens a session and turns the usual failures into messages that
// name the server and the fix.
func (r *Reader) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, r.connCfg.Copy())
	if err == nil {
		return conn, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01":
			return nil, fmt.Errorf("PostgreSQL source %s: password authentication failed for user %s: check the password in the connection string: %w", r.addr, r.connCfg.User, err)
		case "28000":
			return nil, fmt.Errorf("PostgreSQL source %s refused user %s (pg_hba.conf): allow this client or use another user: %w", r.addr, r.connCfg.User, err)
		case "3D000":
			return nil, fmt.Errorf("PostgreSQL source %s has no database %s: fix the database name in the connection string: %w", r.addr, r.connCfg.Database, err)
		}
		return nil, fmt.Errorf("connect to PostgreSQL source %s: %w", r.addr, err)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("connect to PostgreSQL source %s: %w", r.addr, err)
	}
	return nil, fmt.Errorf("cannot reach PostgreSQL source at %s: check the host and port and that the server is running: %w", r.addr, err)
}

// check describes the tables and makes sure the changelog and every
// capture trigger exist and are current, installing them if allowed.
func (r *Reader) check(ctx context.Context) error {
	db := r.connCfg.Database
	// Before the install: a partition's capture trigger is its table's.
	all := make([]pgcatalog.Partitioned, len(r.cfg.Tables))
	for i, t := range r.cfg.Tables {
		oid, _, err := pgcatalog.Table(ctx, r.conn, db, t)
		if err != nil {
			return err
		}
		all[i] = pgcatalog.Partitioned{Name: t, OID: oid}
	}
	if err := pgcatalog.RefuseNested(ctx, r.conn, all); err != nil {
		return err
	}
	if r.cfg.Install {
		if err := Install(ctx, r.conn, r.cfg.Schema, r.cfg.Tables); err != nil {
			return err
		}
	}
	fix := fmt.Sprintf("run `sluice source install` (or start with install enabled) to create sluice's changelog and triggers in schema %s", r.cfg.Schema)
	var ok bool
	err := r.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regprocedure($2) IS NOT NULL`,
		ident(r.cfg.Schema, changelogTable), ident(r.cfg.Schema, captureFunc)+"()").Scan(&ok)
	if err != nil {
		return fmt.Errorf("look up changelog %s.%s: %w", r.cfg.Schema, changelogTable, err)
	}
	if !ok {
		return fmt.Errorf("changelog %s.%s or its capture function is missing in database %s: %s", r.cfg.Schema, changelogTable, db, fix)
	}
	for _, t := range r.cfg.Tables {
		info, err := lookupTable(ctx, r.conn, db, t)
		if err != nil {
			return err
		}
		trg, found, err := lookupTrigger(ctx, r.conn, info.oid, triggerName(r.cfg.Schema), ident(r.cfg.Schema, captureFunc))
		if err != nil {
			return fmt.Errorf("source table %s: %w", t, err)
		}
		switch {
		case !found:
			return fmt.Errorf("source table %s has no capture trigger %s: %s", t, triggerName(r.cfg.Schema), fix)
		case !trg.enabled():
			return fmt.Errorf("capture trigger %s on source table %s is disabled: ALTER TABLE %s ENABLE TRIGGER %s",
				triggerName(r.cfg.Schema), t, ident(t.Schema, t.Name), ident(triggerName(r.cfg.Schema)))
		}
		want := triggerArgs(t, info)
		if !slices.Equal(trg.args, want) {
			key, js, arrs := splitCaptureArgs(trg.args)
			if !slices.Equal(key, info.keyNames()) {
				return fmt.Errorf("capture trigger on source table %s records key (%s) but the primary key is (%s): %s",
					t, strings.Join(key, ", "), strings.Join(info.keyNames(), ", "), fix)
			}
			if slices.Equal(js, info.jsonNullable()) {
				return fmt.Errorf("capture trigger on source table %s records the bounds of array columns (%s) but its array columns are (%s) "+
					"(installed by an older sluice, or the columns changed since), so an array whose lower bound is not 1 would reach the target starting at 1: %s",
					t, strings.Join(arrs, ", "), strings.Join(info.arrayColumns(), ", "), fix)
			}
			if len(js) == 0 {
				return fmt.Errorf("capture trigger on source table %s does not tell SQL NULL from the JSON value null in its nullable json and jsonb columns (%s) "+
					"(installed by an older sluice, or the columns were added or made nullable since), so their JSON nulls would reach the target as SQL NULL: %s",
					t, strings.Join(info.jsonNullable(), ", "), fix)
			}
			return fmt.Errorf("capture trigger on source table %s tells SQL NULL from the JSON value null in columns (%s), but its nullable json and jsonb columns are (%s) "+
				"(the columns changed since the install), so some JSON nulls would reach the target as SQL NULL: %s",
				t, strings.Join(js, ", "), strings.Join(info.jsonNullable(), ", "), fix)
		}
		r.infos = append(r.infos, info)
		r.tables = append(r.tables, info.table)
		r.names = append(r.names, want[0])
		for _, j := range info.json {
			r.hasJSON = r.hasJSON || j
		}
	}
	// The rest (TRUNCATE triggers, the consumer table, current functions)
	// an install by an older sluice lacks. A partition may be created at
	// any moment, since the install too: its TRUNCATE trigger is
	// checkPartitions' to give, when the reader opens and while it runs.
	missing, err := missingObjects(ctx, r.conn, r.cfg.Schema, r.cfg.Tables)
	if err != nil {
		return err
	}
	missing = slices.DeleteFunc(missing, func(m string) bool { return strings.HasPrefix(m, partitionTriggerMissing) })
	if len(missing) > 0 {
		return fmt.Errorf("sluice's capture in schema %s of database %s lacks %s (installed by an older sluice?): %s",
			r.cfg.Schema, db, strings.Join(missing, ", "), fix)
	}
	return nil
}

// buildQueries writes the read statement.
//
// It takes the window's closing snapshot ($1, or a new
// pg_current_snapshot() when $1 is NULL) and selects the window's next page
// in the same statement: pg_current_snapshot() is the statement's own
// snapshot, so the rows it reads are exactly those of the transactions the
// snapshot shows committed. The first result row carries the snapshot, and
// the stream's consumer record (empty while it is valid, why it is lost,
// or NULL when it is gone), read in the same snapshot: a TRUNCATE of the
// changelog that this statement's rows already reflect has marked it
// lost. The xid range bounds the scan for the xid index; the visibility
// tests decide.
//
// Each value's text comes from the server: json_populate_record turns the
// json image back into the table's row type and col::text applies the
// type's own output function, under the session settings pinned in
// readerConnConfig. But json_populate_record reads the JSON value null as
// SQL NULL: a table with json or jsonb columns also gets its raw image and
// the capture's record of its nulls (see fixJSON), and a json or jsonb key
// column (never SQL NULL) is the key image's member itself. TRUNCATE rows
// (op T, P) have no image; a P row's key names the partition.
func (r *Reader) buildQueries() {
	log := ident(r.cfg.Schema, changelogTable)
	var b strings.Builder
	fmt.Fprintf(&b, `WITH s AS MATERIALIZED (
	SELECT coalesce($1::pg_snapshot, pg_current_snapshot()) AS cur
), page AS MATERIALIZED (
	SELECT c.id, c.xid, array_position($4::text[], c.tbl) AS t, c.op::text AS op, c.key, c.data, c.nulls, c.dims, c.at
	FROM %s c, s
	WHERE c.xid >= pg_snapshot_xmin($2::pg_snapshot) AND c.xid < pg_snapshot_xmax(s.cur)
		AND pg_visible_in_snapshot(c.xid, s.cur) AND NOT pg_visible_in_snapshot(c.xid, $2::pg_snapshot)
		AND c.id > $3 AND c.tbl = ANY($4::text[])
	ORDER BY c.id
	LIMIT $5
)
SELECT NULL::bigint AS id, NULL::text AS xid, 0 AS t, NULL::text AS op, NULL::text[] AS data, NULL::text[] AS key, NULL::text AS raw,
	NULL::text AS nulls, NULL::timestamptz AS at, (SELECT cur::text FROM s) AS snap, (SELECT coalesce(lost, '') FROM %s WHERE stream = $6) AS note`,
		log, ident(r.cfg.Schema, consumerTable))
	for i, info := range r.infos {
		rt := ident(info.table.Name.Schema, info.table.Name.Name)
		cols := make([]string, len(info.table.Columns))
		for j, c := range info.table.Columns {
			cols[j] = "r." + ident(c.Name) + "::text"
			if info.array[j] {
				// The image's array starts at 1; the capture recorded
				// the bounds of one that does not, and array_in takes
				// them before the text (a row an older capture wrote
				// has none).
				name := quoteLiteral(c.Name)
				cols[j] = fmt.Sprintf("CASE WHEN c.dims ->> %[1]s IS NULL THEN %[2]s ELSE (json_populate_record(NULL::%[3]s, json_build_object(%[1]s, (c.dims ->> %[1]s) || '=' || %[2]s))).%[4]s::text END",
					name, cols[j], rt, ident(c.Name))
			}
		}
		keys := make([]string, len(info.table.Key))
		for j, k := range info.table.Key {
			if name := info.table.Columns[k].Name; info.json[k] {
				// The member's text as the capture wrote it: the
				// column's own (jsonb) text, and null for the JSON null.
				// A missing member is SQL NULL, which change refuses.
				keys[j] = "(c.key -> " + quoteLiteral(name) + ")::text"
			} else {
				keys[j] = "k." + ident(name) + "::text"
			}
		}
		raw, nulls := "NULL::text", "NULL::text"
		if slices.Contains(info.json, true) {
			raw, nulls = "c.data::text", "c.nulls::text"
		}
		fmt.Fprintf(&b, `
UNION ALL
SELECT c.id, c.xid::text, c.t, c.op,
	CASE WHEN c.data IS NOT NULL THEN ARRAY[%s] END,
	CASE WHEN c.key IS NOT NULL AND c.op <> 'P' THEN ARRAY[%s] END,
	%s, %s, c.at, NULL, CASE WHEN c.op = 'P' THEN c.key::text END
FROM page c
	LEFT JOIN LATERAL json_populate_record(NULL::%s, c.data) r ON true
	LEFT JOIN LATERAL json_populate_record(NULL::%s, CASE WHEN c.op <> 'P' THEN c.key END) k ON true
WHERE c.t = %d`, strings.Join(cols, ", "), strings.Join(keys, ", "), raw, nulls, rt, rt, i+1)
	}
	b.WriteString("\nORDER BY id NULLS FIRST")
	r.query = b.String()
}

// Tables describes the streamed tables.
func (r *Reader) Tables() []*sluice.Table { return r.tables }

// Start returns the position the reader started from: the one it was
// opened at, or for a reader opened without one the position before every
// changelog row. It is a valid resume position.
func (r *Reader) Start() sluice.Position { return r.start.sluice() }

// Read returns up to max changes in order. It waits up to the poll interval
// for changes and returns an empty slice when none came.
func (r *Reader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	if max <= 0 {
		return nil, fmt.Errorf("pgtrigger source: Read max %d: want a positive number", max)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return nil, errors.New("pgtrigger source: reader is closed")
	}
	if r.conn.IsClosed() {
		// A failed Read lost the session (server restart, network). The
		// position lives here, not in the session, so a new one resumes
		// exactly where the last returned change left off.
		conn, err := r.connect(ctx)
		if err != nil {
			return nil, err
		}
		r.conn = conn
		r.log.Info("pgtrigger reader reconnected")
	}
	if err := r.watchPartitions(ctx); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(r.cfg.PollInterval)
	tick := min(pollEvery, r.cfg.PollInterval)
	for {
		wasOpen := r.pos.open
		changes, err := r.page(ctx, max)
		if err != nil {
			return nil, err
		}
		if len(changes) > 0 {
			r.lastOut = r.pos.outer()
			return changes, nil
		}
		if wasOpen {
			// The window's last page was full and this one empty: the
			// window is done, look at the next one at once.
			continue
		}
		// An empty window closed at a new snapshot. Only a snapshot that
		// sees more than the last position handed out is progress (and
		// then Covers can place it against every earlier position).
		if s := r.pos.prev; r.lastOut.le(s) && !s.le(r.lastOut) && time.Since(r.lastProgress) >= r.cfg.ProgressInterval {
			r.lastOut, r.lastProgress = s, time.Now()
			return []sluice.Change{{Op: sluice.OpProgress, Pos: r.pos.sluice()}}, nil
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(tick, wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// page reads the next page of the open window, or opens the next window
// and reads its first page. It closes the window once a page comes back
// short.
func (r *Reader) page(ctx context.Context, max int) ([]sluice.Change, error) {
	var cur *string
	if r.pos.open {
		s := r.pos.cur.String()
		cur = &s
	}
	rows, err := r.conn.Query(ctx, r.query, cur, r.pos.prev.String(), r.pos.last, r.names, max, r.stream)
	if err != nil {
		return nil, r.readErr(err)
	}
	defer rows.Close()
	var (
		changes []sluice.Change
		id      pgtype.Int8
		xid     pgtype.Text
		t       int
		op      pgtype.Text
		data    []pgtype.Text
		key     []pgtype.Text
		raw     pgtype.Text
		nulls   pgtype.Text
		at      pgtype.Timestamptz
		snap    pgtype.Text
		note    pgtype.Text
		next    = r.pos
	)
	first := true
	for rows.Next() {
		if err := rows.Scan(&id, &xid, &t, &op, &data, &key, &raw, &nulls, &at, &snap, &note); err != nil {
			if first {
				return nil, r.readErr(err)
			}
			return nil, fmt.Errorf("read changelog row %d: %w", id.Int64, r.readErr(err))
		}
		if first {
			first = false
			if err := r.consumerValid(note); err != nil {
				return nil, err
			}
			s, err := parseSnapshot(snap.String)
			if err != nil {
				return nil, fmt.Errorf("read source snapshot: %w", err)
			}
			if !next.open {
				next.cur, next.open, next.last = s, true, 0
			}
			continue
		}
		if t < 1 || t > len(r.infos) {
			return nil, fmt.Errorf("changelog row %d: unexpected table index %d", id.Int64, t)
		}
		c, err := r.change(r.infos[t-1], id.Int64, op.String, data, key, raw, nulls, note)
		if err != nil {
			return nil, err
		}
		if next.xid, err = strconv.ParseUint(xid.String, 10, 64); err != nil {
			return nil, fmt.Errorf("changelog row %d: transaction id %q: %w", id.Int64, xid.String, err)
		}
		next.last = id.Int64
		c.Pos = next.sluice()
		c.Time = at.Time
		changes = append(changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, r.readErr(err)
	}
	if first {
		return nil, errors.New("read source changelog: no snapshot row")
	}
	if len(changes) < max {
		// The window is exhausted: the next one starts where it ends.
		next = position{prev: next.cur}
	}
	r.pos = next
	return changes, nil
}

// consumerValid turns the stream's consumer record, as the read statement
// saw it, into an error when the changelog no longer serves the stream.
func (r *Reader) consumerValid(note pgtype.Text) error {
	switch {
	case !note.Valid:
		return fmt.Errorf("stream %s: its consumer record in %s.%s was removed while it ran (`sluice source uninstall --stream-id`?), so other streams may prune changes it has not read: "+
			"restart the stream, which registers again and checks that its position can still be served", r.stream, r.cfg.Schema, consumerTable)
	case note.String != "":
		return fmt.Errorf("stream %s: %s, so changes it had not read are gone: %s: %w", r.stream, note.String, lostFix(r.stream), ErrPositionLost)
	}
	return nil
}

func (r *Reader) readErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42703" || pgErr.Code == "42P01" || pgErr.Code == "42846") {
		return fmt.Errorf("read changelog %s.%s: a source table changed since sluice described it (%s): restart sluice: %w",
			r.cfg.Schema, changelogTable, pgErr.Message, err)
	}
	return fmt.Errorf("read changelog %s.%s on %s: %w", r.cfg.Schema, changelogTable, r.addr, err)
}

// change builds one Change from a changelog row.
func (r *Reader) change(info *tableInfo, id int64, op string, data, key []pgtype.Text, raw, nulls, note pgtype.Text) (sluice.Change, error) {
	t := info.table
	c := sluice.Change{Table: t}
	switch op {
	case "I":
		c.Op = sluice.OpInsert
	case "U":
		c.Op = sluice.OpUpdate
	case "D":
		c.Op = sluice.OpDelete
	case "T":
		c.Op = sluice.OpTruncate
		return c, nil
	case "P":
		// The TRUNCATE trigger names the partition; a reader that found
		// the partitions changed writes the event.
		e, err := pgcatalog.ParseEvent(note.String)
		if err != nil {
			return c, fmt.Errorf("changelog row %d of source table %s: %w", id, t.Name, err)
		}
		if e.Kind != "" {
			return c, fmt.Errorf("%w (changelog row %d)", e.Err(), id)
		}
		return c, &sluice.TableError{Table: t.Name, Err: fmt.Errorf(
			"partition %s of source table %s was truncated (changelog row %d): the target cannot truncate part of a table, and the stream cannot go on without it: "+
				"re-sync %s on the target from a fresh copy, then start the stream from the copy's position: %w", e.Partition, t.Name, id, t.Name, ErrPartialTruncate)}
	default:
		return c, fmt.Errorf("changelog row %d of source table %s: unknown op %q", id, t.Name, op)
	}
	if c.Op != sluice.OpDelete {
		if len(data) != len(t.Columns) {
			return c, fmt.Errorf("changelog row %d of source table %s: no row image", id, t.Name)
		}
		c.Row = make(sluice.Row, len(data))
		for i, v := range data {
			c.Row[i] = value(v)
		}
		if raw.Valid {
			legacy, err := fixJSON(info, c.Row, raw.String, nulls)
			if err != nil {
				return c, fmt.Errorf("changelog row %d of source table %s: %w", id, t.Name, err)
			}
			r.warnLegacyNulls(t, id, legacy)
		}
	}
	if c.Op != sluice.OpInsert {
		if len(key) == len(t.Key) {
			c.Key = make(sluice.Row, len(key))
			for i, v := range key {
				c.Key[i] = value(v)
			}
		} else if c.Op == sluice.OpUpdate {
			c.Key = t.KeyOf(c.Row)
		} else {
			return c, fmt.Errorf("changelog row %d of source table %s: delete without a key", id, t.Name)
		}
		for i, v := range c.Key {
			if v.Null {
				return c, fmt.Errorf("changelog row %d of source table %s: key column %s is NULL (was the trigger installed for another primary key? run `sluice source install`)",
					id, t.Name, t.Columns[t.Key[i]].Name)
			}
		}
	}
	return c, nil
}

func value(v pgtype.Text) sluice.Value {
	if !v.Valid {
		return sluice.Null
	}
	return sluice.Text(v.String)
}

// fixJSON replaces the values of json and jsonb columns with their text
// as stored (see jsonFields): json_populate_record normalises json text
// and reads the JSON value null as SQL NULL.
//
// row_to_json writes SQL NULL and the JSON value null alike. A NOT NULL
// column holds the JSON value; for a nullable one, nulls (the changelog
// row's nulls column, see tableSQL) says which it is. A column it does
// not name was captured by a trigger that did not tell them apart (one
// installed by an older sluice, or before the column was added or made
// nullable): it reads as SQL NULL, as sluice read it before, and fixJSON
// returns its name so that the reader can say so.
func fixJSON(info *tableInfo, row sluice.Row, raw string, nulls pgtype.Text) (legacy []string, err error) {
	fields, err := jsonFields(raw)
	if err != nil {
		return nil, fmt.Errorf("row image: %w", err)
	}
	var sqlNull map[string]bool
	if nulls.Valid {
		if err := json.Unmarshal([]byte(nulls.String), &sqlNull); err != nil {
			return nil, fmt.Errorf("record of the nulls in json columns %s: %w", nulls.String, err)
		}
	}
	for i, isJSON := range info.json {
		if !isJSON {
			continue
		}
		col := info.table.Columns[i]
		text, ok := fields[col.Name]
		switch {
		case !ok:
			row[i] = sluice.Null
		case text != "null" || !col.Nullable:
			row[i] = sluice.Text(text)
		default:
			isNull, known := sqlNull[col.Name]
			switch {
			case !known:
				legacy = append(legacy, col.Name)
				row[i] = sluice.Null
			case isNull:
				row[i] = sluice.Null
			default:
				row[i] = sluice.Text(text)
			}
		}
	}
	return legacy, nil
}

// warnLegacyNulls says, once per column, that changelog row id held a null
// in json columns cols that its trigger did not tell apart (see fixJSON):
// the target gets SQL NULL there even where the source holds the JSON
// value null.
func (r *Reader) warnLegacyNulls(t *sluice.Table, id int64, cols []string) {
	for _, c := range cols {
		k := t.Name.String() + "." + c
		if r.legacyNulls[k] {
			continue
		}
		r.legacyNulls[k] = true
		r.log.Warn("json column captured without telling SQL NULL from JSON null: read as SQL NULL",
			"table", t.Name.String(), "column", c, "changelog_row", id,
			"why", "captured by a trigger installed by an older sluice, or before the column was added or made nullable; rows captured since `sluice source install` are exact",
			"fix", "if the source row holds the JSON value null, update it on the source (or re-sync the table) so the target gets it")
	}
}

// Ack records that the target holds every change pos covers, and prunes
// the changelog rows every stream reading it has acknowledged: the rows of
// the windows before a position's and of its window up to its last id.
// Pruning runs at most every two seconds; a later Ack prunes what an
// earlier one skipped.
func (r *Reader) Ack(ctx context.Context, pos sluice.Position) error {
	p, err := parsePosition(pos)
	if err != nil {
		return err
	}
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	if time.Since(r.lastPrune) < r.pruneEvery {
		r.pending = &p
		return nil
	}
	r.pending = nil
	if r.ackConn == nil {
		if r.ackConn, err = r.connect(ctx); err != nil {
			return err
		}
	}
	n, behind, err := r.prune(ctx, p)
	if err != nil {
		// The session may be broken; the next Ack reconnects.
		r.ackConn.Close(context.Background())
		r.ackConn = nil
		r.pending = &p
		return fmt.Errorf("prune changelog %s.%s up to %s for stream %s: %w", r.cfg.Schema, changelogTable, pos, r.stream, err)
	}
	r.lastPrune = time.Now()
	r.warnPinned(behind)
	r.log.Debug("pruned changelog", "rows", n, "position", pos.String())
	return nil
}

// Close ends the reader's sessions.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	var errs []error
	ctx := context.Background()
	if r.conn != nil {
		errs = append(errs, r.conn.Close(ctx))
		r.conn = nil
	}
	if r.ackConn != nil {
		errs = append(errs, r.ackConn.Close(ctx))
		r.ackConn = nil
	}
	return errors.Join(errs...)
}

// PositionAt returns the position from which a reader streams exactly the
// changes that conn's current snapshot does not see. Call it inside the
// REPEATABLE READ transaction that copies the source tables, after the
// capture triggers are installed, and start the reader from it.
func PositionAt(ctx context.Context, conn *pgx.Conn) (sluice.Position, error) {
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&s); err != nil {
		return sluice.Position{}, fmt.Errorf("read source snapshot: %w", err)
	}
	snap, err := parseSnapshot(s)
	if err != nil {
		return sluice.Position{}, fmt.Errorf("read source snapshot: %w", err)
	}
	return position{prev: snap}.sluice(), nil
}
