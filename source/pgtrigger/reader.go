package pgtrigger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
