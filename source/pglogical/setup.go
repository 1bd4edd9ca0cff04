package pglogical

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// Config configures Setup, Uninstall and a Reader.
type Config struct {
	// Tables to stream; an empty Schema means "public".
	Tables []sluice.TableName
	// Stream names the stream; the slot and publication default to
	// "sluice_<stream>" (lower case, anything but [a-z0-9_] turned into _).
	Stream string
	// Slot is the logical replication slot. Default "sluice_<stream>".
	Slot string
	// Publication is the publication the slot decodes. Default
	// "sluice_<stream>".
	Publication string
	// StatusInterval is how often the reader sends a standby status update
	// (also when idle) and checks the slot's retained WAL. Default 10s.
	StatusInterval time.Duration
	// MaxRetainedWAL is the retained WAL above which the reader warns.
	// Default 1 GiB.
	MaxRetainedWAL int64
	// Truncate is what to do with a TRUNCATE of a streamed table: "apply"
	// (the default) hands it out in order (sluice.OpTruncate), and the
	// target truncates its table at the same point of the stream; "refuse"
	// stops the stream with an error before it.
	Truncate string
	// ProgressInterval is the least time between two progress markers
	// (sluice.OpProgress) handed out while the streamed tables are quiet.
	// Default 5s.
	ProgressInterval time.Duration
	// AcceptSlotAhead accepts a slot whose confirmed position is past the
	// position the reader opens at, which otherwise means transactions
	// are gone from the slot. Only for a checkpoint written by a sluice
	// that moved an idle slot without checkpointing (before 2026-12).
	AcceptSlotAhead bool
	// FromNow makes a reader opened without a position skip whatever the
	// slot retains and stream only what commits from now on. Without it the
	// reader streams everything since the slot was created.
	FromNow bool
	// PollInterval is how long Read waits for changes before it returns an
	// empty slice. Default 200ms.
	PollInterval time.Duration
	// BufferBytes bounds the bytes of changes decoded ahead of Read.
	// Default source.DefaultBufferBytes.
	BufferBytes int64
	// CatchUpRows is how many rows the first catch-up call decodes (see
	// catchup.go; each after it asks for twice as many, up to 16 times
	// this): a reader that opens with at least CatchUpMinWAL bytes of WAL
	// behind its slot reads them through the SQL interface before it
	// streams. Default 16384; negative turns catch-up off.
	CatchUpRows int
	// CatchUpMinWAL is the WAL behind the slot, in bytes, from which a
	// reader catches up before streaming. Default 4 MiB.
	CatchUpMinWAL int64
	Logger        *slog.Logger
}

const (
	defaultStatusInterval = 10 * time.Second
	defaultMaxRetainedWAL = 1 << 30
	defaultPollInterval   = 200 * time.Millisecond
)

// withDefaults fills in defaults and checks the configuration.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Tables) == 0 {
		return cfg, errors.New("pglogical source: no tables configured")
	}
	cfg.Tables = normalize(cfg.Tables)
	for i, t := range cfg.Tables {
		if slices.Contains(cfg.Tables[:i], t) {
			return cfg, fmt.Errorf("pglogical source: table %s is listed twice", t)
		}
	}
	if cfg.Slot == "" || cfg.Publication == "" {
		if cfg.Stream == "" {
			return cfg, errors.New("pglogical source: set the stream name (or both Slot and Publication) to name the replication slot and publication")
		}
		def := DefaultName(cfg.Stream)
		if cfg.Slot == "" {
			cfg.Slot = def
		}
		if cfg.Publication == "" {
			cfg.Publication = def
		}
	}
	if err := checkSlotName(cfg.Slot); err != nil {
		return cfg, err
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = defaultStatusInterval
	}
	if cfg.MaxRetainedWAL <= 0 {
		cfg.MaxRetainedWAL = defaultMaxRetainedWAL
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.CatchUpRows == 0 {
		cfg.CatchUpRows = defaultCatchUpRows
	}
	if cfg.CatchUpMinWAL <= 0 {
		cfg.CatchUpMinWAL = defaultCatchUpMinWAL
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 5 * time.Second
	}
	switch cfg.Truncate {
	case "":
		cfg.Truncate = "apply"
	case "refuse", "apply":
	default:
		return cfg, fmt.Errorf("pglogical source: truncate setting %q: want refuse or apply", cfg.Truncate)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// DefaultName is the slot and publication name for a stream:
// "sluice_<stream>" in lower case with every character other than a-z, 0-9
// and _ replaced by _, cut to PostgreSQL's 63-byte limit.
func DefaultName(stream string) string {
	var b strings.Builder
	b.WriteString("sluice_")
	for _, r := range strings.ToLower(stream) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

func checkSlotName(s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("pglogical source: replication slot name %q: want 1 to 63 characters", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("pglogical source: replication slot name %q: PostgreSQL allows only lower case letters, digits and _", s)
		}
	}
	return nil
}

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

func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// sqlConnConfig is the configuration of the reader's ordinary (catalog)
// session.
func sqlConnConfig(connString string) (*pgx.ConnConfig, error) {
	c, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pglogical source: parse connection string: %w", err)
	}
	if c.RuntimeParams["application_name"] == "" {
		c.RuntimeParams["application_name"] = "sluice-pglogical"
	}
	return c, nil
}

// replConnConfig is the configuration of the replication session. pgoutput
// renders values with the types' output functions under the walsender's
// own settings, so they are pinned to pgtrigger.SessionSettings: a value's
// text is what `col::text` gives under them, for both readers.
func replConnConfig(connString string) (*pgconn.Config, error) {
	c, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pglogical source: parse connection string: %w", err)
	}
	pinDecodingSettings(c.RuntimeParams)
	c.RuntimeParams["replication"] = "database"
	if c.RuntimeParams["application_name"] == "" {
		c.RuntimeParams["application_name"] = "sluice-pglogical"
	}
	return c, nil
}

// pinDecodingSettings sets, in a session's startup parameters, the
// settings pgoutput renders values under: the replication session's and a
// catch-up session's (see catchup.go) must be the same.
func pinDecodingSettings(params map[string]string) {
	for k, v := range pgtrigger.SessionSettings() {
		params[k] = v
	}
}

// connectErr turns the usual connection failures into messages that name
// the server and the fix.
func connectErr(addr, user, db string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01":
			return fmt.Errorf("PostgreSQL source %s: password authentication failed for user %s: check the password in the connection string: %w", addr, user, err)
		case "28000":
			return fmt.Errorf("PostgreSQL source %s refused user %s (pg_hba.conf; replication connections need a line for database %s with the replication privilege): allow this client or use another user: %w", addr, user, db, err)
		case "3D000":
			return fmt.Errorf("PostgreSQL source %s has no database %s: fix the database name in the connection string: %w", addr, db, err)
		case "53300":
			return fmt.Errorf("PostgreSQL source %s: no connection slot left (max_connections or max_wal_senders reached): raise max_wal_senders (needs a restart) or stop an idle replication client: %w", addr, err)
		}
	}
	return fmt.Errorf("connect to PostgreSQL source %s as %s: %w", addr, user, err)
}

func addrOf(host string, port uint16) string { return net.JoinHostPort(host, fmt.Sprint(port)) }

func connectSQL(ctx context.Context, connString string) (*pgx.Conn, error) {
	c, err := sqlConnConfig(connString)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return nil, connectErr(addrOf(c.Host, c.Port), c.User, c.Database, err)
	}
	return conn, nil
}

// tableInfo is a source table as the catalog describes it.
type tableInfo struct {
	oid   uint32
	table *sluice.Table
	// typ holds each column's type oid and typmod, aligned with
	// table.Columns, to compare with relation messages.
	typ []colType
	// attnums are the columns' numbers, by name: a column renamed keeps
	// its number.
	attnums map[string]int16
	// leaves are a partitioned table's leaf partitions, whose relations
	// pgoutput names in its changes; nil for a table that is not
	// partitioned.
	leaves []pgcatalog.Partition
	// partOf are the partitioned tables it is a partition of, nearest
	// first.
	partOf []uint32
}

type colType struct {
	oid    uint32
	typmod int32
	// base is the type's oid, or for a domain its base type's: it says
	// how to turn the output function's text into the text of col::text.
	base uint32
}

// describe looks a table up in the catalog and checks it can be streamed:
// it exists, has a primary key and a replica identity that sends that key.
func describe(ctx context.Context, conn *pgx.Conn, db string, name sluice.TableName) (*tableInfo, error) {
	oid, ident, err := pgcatalog.Table(ctx, conn, db, name)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, a.atttypid, a.atttypmod,
			coalesce(nullif(t.typbasetype, 0), t.oid), a.attnum
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	info := &tableInfo{oid: oid, table: &sluice.Table{Name: name}, attnums: map[string]int16{}}
	for rows.Next() {
		var c sluice.Column
		var t colType
		var attnum int16
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &t.oid, &t.typmod, &t.base, &attnum); err != nil {
			rows.Close()
			return nil, fmt.Errorf("describe source table %s: %w", name, err)
		}
		info.table.Columns = append(info.table.Columns, c)
		info.typ = append(info.typ, t)
		info.attnums[c.Name] = attnum
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe source table %s: %w", name, err)
	}
	enums, err := pgcatalog.EnumLabels(ctx, conn, name, oid)
	if err != nil {
		return nil, err
	}
	for i, c := range info.table.Columns {
		info.table.Columns[i].Enum = enums[c.Name]
	}
	keys, err := pgcatalog.PrimaryKey(ctx, conn, name, oid)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		hint := ""
		switch ident {
		case "f":
			hint = " (REPLICA IDENTITY FULL is not enough:"
		case "i":
			hint = " (REPLICA IDENTITY USING INDEX is not enough:"
		}
		if hint != "" {
			return nil, fmt.Errorf("table %s has no primary key%s sluice keys rows by the primary key to apply changes idempotently): add a primary key", name, hint)
		}
		return nil, fmt.Errorf("table %s has no primary key; sluice needs one to apply changes idempotently: add one", name)
	}
	switch ident {
	case "d", "f":
		// DEFAULT sends the old primary key when it changes; FULL the
		// whole old row, which holds it.
	case "n":
		return nil, fmt.Errorf("table %s has REPLICA IDENTITY NOTHING, so PostgreSQL does not log the key of updated and deleted rows: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", name, ident2(name))
	case "i":
		return nil, fmt.Errorf("table %s has REPLICA IDENTITY USING INDEX, so PostgreSQL logs that index's columns rather than the primary key sluice needs: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", name, ident2(name))
	}
	for _, k := range keys {
		i := info.table.ColumnIndex(k)
		if i < 0 {
			return nil, fmt.Errorf("source table %s: primary key column %s not among its columns", name, k)
		}
		info.table.Key = append(info.table.Key, i)
	}
	// pgoutput sends no generated column (until PostgreSQL 18's
	// publish_generated_columns): the target must compute them itself.
	if info.table.Omitted, err = pgcatalog.GeneratedColumns(ctx, conn, name, oid); err != nil {
		return nil, err
	}
	if info.leaves, err = pgcatalog.Leaves(ctx, conn, name, oid); err != nil {
		return nil, err
	}
	if info.leaves != nil {
		var version int
		if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
			return nil, fmt.Errorf("read the server version: %w", err)
		}
		if version < pgcatalog.MinLogicalVersion {
			return nil, fmt.Errorf("source table %s is partitioned, and the logical source streams partitioned tables from PostgreSQL 14 on (whose pgoutput carries the markers that stop the stream where a partition leaves the table): use --source-mode trigger, or upgrade the server", name)
		}
	}
	if info.partOf, err = pgcatalog.Ancestors(ctx, conn, oid); err != nil {
		return nil, err
	}
	return info, nil
}

// describeAll describes the tables (describe) and refuses a list that
// names a partition and a partitioned table it belongs to: its rows would
// be streamed twice.
func describeAll(ctx context.Context, conn *pgx.Conn, db string, tables []sluice.TableName) ([]*tableInfo, error) {
	infos := make([]*tableInfo, len(tables))
	for i, t := range tables {
		var err error
		if infos[i], err = describe(ctx, conn, db, t); err != nil {
			return nil, err
		}
	}
	all := make([]pgcatalog.Partitioned, len(infos))
	for i, in := range infos {
		all[i] = pgcatalog.Partitioned{Name: in.table.Name, OID: in.oid}
	}
	if err := pgcatalog.RefuseNested(ctx, conn, all); err != nil {
		return nil, err
	}
	return infos, nil
}

func ident2(t sluice.TableName) string { return ident(t.Schema, t.Name) }

// preflight checks the server settings and the role: wal_level, the
// REPLICATION attribute, and free replication slots and WAL senders.
// needSlot says a slot is about to be created.
func preflight(ctx context.Context, conn *pgx.Conn, cfg Config, needSlot bool) error {
	addr := addrOf(conn.Config().Host, conn.Config().Port)
	var walLevel string
	if err := conn.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&walLevel); err != nil {
		return fmt.Errorf("read wal_level on %s: %w", addr, err)
	}
	if walLevel != "logical" {
		return fmt.Errorf("PostgreSQL source %s has wal_level=%s; logical replication needs wal_level=logical: set wal_level=logical (ALTER SYSTEM SET wal_level = logical) and restart the server, or use the trigger source", addr, walLevel)
	}
	var user string
	var repl, super bool
	if err := conn.QueryRow(ctx, `SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&user, &repl, &super); err != nil {
		return fmt.Errorf("read the attributes of the current role on %s: %w", addr, err)
	}
	if !repl && !super {
		return fmt.Errorf("role %s on PostgreSQL source %s lacks the REPLICATION attribute: run ALTER ROLE %s REPLICATION (as a superuser), or use the trigger source", user, addr, ident(user))
	}
	var maxSlots, usedSlots, maxSenders, usedSenders int
	err := conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots)::int,
			current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)::int`).
		Scan(&maxSlots, &usedSlots, &maxSenders, &usedSenders)
	if err != nil {
		return fmt.Errorf("read replication limits on %s: %w", addr, err)
	}
	if needSlot && usedSlots >= maxSlots {
		return fmt.Errorf("PostgreSQL source %s: all %d replication slots are in use (max_replication_slots=%d): drop an unused slot (SELECT pg_drop_replication_slot(name)) or raise max_replication_slots and restart the server", addr, usedSlots, maxSlots)
	}
	if usedSenders >= maxSenders {
		return fmt.Errorf("PostgreSQL source %s: all %d WAL senders are in use (max_wal_senders=%d): stop an idle replication client or raise max_wal_senders and restart the server", addr, usedSenders, maxSenders)
	}
	return nil
}

// slotInfo is a replication slot as pg_replication_slots has it.
type slotInfo struct {
	exists    bool
	plugin    string
	database  string
	active    bool
	confirmed pglogrepl.LSN
}

// Setup checks the source (wal_level, the role, the tables) and creates
// what is missing: the publication for the configured tables (or the tables
// an existing publication lacks) and the logical replication slot. It is
// idempotent.
func Setup(ctx context.Context, connString string, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	conn, err := connectSQL(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = setup(ctx, conn, cfg)
	return err
}

// setup is Setup on an open session; it returns the tables as described.
func setup(ctx context.Context, conn *pgx.Conn, cfg Config) ([]*tableInfo, error) {
	db := conn.Config().Database
	slot, err := lookupSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return nil, err
	}
	if err := preflight(ctx, conn, cfg, !slot.exists); err != nil {
		return nil, err
	}
	infos, err := describeAll(ctx, conn, db, cfg.Tables)
	if err != nil {
		return nil, err
	}
	if err := ensurePublication(ctx, conn, cfg, infos); err != nil {
		return nil, err
	}
	if slot.exists {
		if slot.plugin != "pgoutput" || slot.database != db {
			return nil, fmt.Errorf("replication slot %s exists but belongs to database %q with plugin %q, not database %q with pgoutput: choose another slot name or drop it (SELECT pg_drop_replication_slot('%s'))",
				cfg.Slot, slot.database, slot.plugin, db, cfg.Slot)
		}
		return infos, initRecord(ctx, conn, cfg, infos, false)
	}
	// The record of the partitions goes first: the slot streams from
	// its creation on.
	if err := initRecord(ctx, conn, cfg, infos, true); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, cfg.Slot); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "53400" {
			return nil, fmt.Errorf("create replication slot %s: all replication slots are in use: drop an unused slot or raise max_replication_slots and restart the server: %w", cfg.Slot, err)
		}
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			return infos, nil // created concurrently
		}
		return nil, fmt.Errorf("create replication slot %s: %w", cfg.Slot, err)
	}
	cfg.Logger.Info("created replication slot", "slot", cfg.Slot, "database", db)
	return infos, nil
}

func lookupSlot(ctx context.Context, conn *pgx.Conn, name string) (slotInfo, error) {
	var s slotInfo
	var plugin, db *string
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT plugin, database, active, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&plugin, &db, &s.active, &confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("look up replication slot %s: %w", name, err)
	}
	s.exists = true
	if plugin != nil {
		s.plugin = *plugin
	}
	if db != nil {
		s.database = *db
	}
	if confirmed != nil {
		if s.confirmed, err = parseLSN(*confirmed); err != nil {
			return s, fmt.Errorf("replication slot %s: confirmed_flush_lsn: %w", name, err)
		}
	}
	return s, nil
}

// ensurePublication creates the publication or adds the tables it lacks.
//
// A partitioned table is published as itself: pgoutput then sends the
// changes of its leaf partitions, under the leaves' names (the reader maps
// them to the table), and a TRUNCATE of one leaf. With
// publish_via_partition_root it would send the changes under the table's
// name but drop a TRUNCATE of one partition without a trace, so a
// publication with it is refused for a partitioned table.
func ensurePublication(ctx context.Context, conn *pgx.Conn, cfg Config, infos []*tableInfo) error {
	var all bool
	err := conn.QueryRow(ctx, `SELECT puballtables FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&all)
	if errors.Is(err, pgx.ErrNoRows) {
		names := make([]string, len(cfg.Tables))
		for i, t := range cfg.Tables {
			names[i] = ident2(t)
		}
		if _, err := conn.Exec(ctx, `CREATE PUBLICATION `+ident(cfg.Publication)+` FOR TABLE `+strings.Join(names, ", ")); err != nil {
			return fmt.Errorf("create publication %s for %s: %w", cfg.Publication, strings.Join(names, ", "), pubHint(err))
		}
		cfg.Logger.Info("created publication", "publication", cfg.Publication, "tables", len(names))
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	}
	missing, err := unpublished(ctx, conn, cfg, infos)
	if err != nil || all {
		return err
	}
	for _, in := range missing {
		t := in.table.Name
		if _, err := conn.Exec(ctx, `ALTER PUBLICATION `+ident(cfg.Publication)+` ADD TABLE `+ident2(t)); err != nil {
			return fmt.Errorf("add table %s to publication %s: %w", t, cfg.Publication, pubHint(err))
		}
		cfg.Logger.Info("added table to publication", "publication", cfg.Publication, "table", t.String())
	}
	return nil
}

// unpublished returns the tables an existing publication does not publish,
// after checking that it publishes the others under their own names (or
// their leaf partitions'). A table is published when it is a member (a
// partitioned table's leaves are then published, without
// publish_via_partition_root) or pg_publication_tables lists it (a member
// of a schema or all-tables publication).
func unpublished(ctx context.Context, conn *pgx.Conn, cfg Config, infos []*tableInfo) ([]*tableInfo, error) {
	var viaRoot bool
	// pubviaroot exists from PostgreSQL 13 on.
	if err := conn.QueryRow(ctx, `SELECT coalesce((to_jsonb(p) ->> 'pubviaroot')::boolean, false) FROM pg_publication p WHERE pubname = $1`,
		cfg.Publication).Scan(&viaRoot); err != nil {
		return nil, fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	}
	var missing []*tableInfo
	for _, in := range infos {
		t := in.table.Name
		var member, listed bool
		if err := conn.QueryRow(ctx, `SELECT
				EXISTS (SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1 AND r.prrelid = $2),
				EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $3 AND tablename = $4)`,
			cfg.Publication, in.oid, t.Schema, t.Name).Scan(&member, &listed); err != nil {
			return nil, fmt.Errorf("read the tables of publication %s: %w", cfg.Publication, err)
		}
		ancestorListed := false
		if viaRoot && len(in.partOf) > 0 {
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables t
					JOIN pg_namespace n ON n.nspname = t.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
					WHERE t.pubname = $1 AND c.oid = ANY($2))`, cfg.Publication, in.partOf).Scan(&ancestorListed); err != nil {
				return nil, fmt.Errorf("read the tables of publication %s: %w", cfg.Publication, err)
			}
		}
		switch {
		case viaRoot && in.leaves != nil:
			return nil, fmt.Errorf("publication %s publishes partitions through their partitioned table (publish_via_partition_root), which hides a TRUNCATE of one partition of %s from logical decoding: "+
				"run ALTER PUBLICATION %s SET (publish_via_partition_root = false)", cfg.Publication, t, ident(cfg.Publication))
		case ancestorListed:
			return nil, fmt.Errorf("publication %s publishes partition %s through a partitioned table it belongs to (publish_via_partition_root), so its changes would arrive under that table's name: "+
				"run ALTER PUBLICATION %s SET (publish_via_partition_root = false)", cfg.Publication, t, ident(cfg.Publication))
		}
		if !member && !listed {
			missing = append(missing, in)
		}
	}
	return missing, nil
}

func pubHint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("the role must own the tables and have CREATE on the database to publish them: %w", err)
	}
	return err
}

// Uninstall drops the replication slot and the publication, if they exist.
// The slot must not be in use.
func Uninstall(ctx context.Context, connString string, cfg Config) error {
	if len(cfg.Tables) == 0 {
		cfg.Tables = []sluice.TableName{{Name: "-"}} // not needed here
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	conn, err := connectSQL(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	slot, err := lookupSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return err
	}
	if slot.exists {
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, cfg.Slot); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55006" {
				return fmt.Errorf("drop replication slot %s: it is in use by a running reader: stop sluice first: %w", cfg.Slot, err)
			}
			return fmt.Errorf("drop replication slot %s: %w", cfg.Slot, err)
		}
	}
	if _, err := conn.Exec(ctx, `DROP PUBLICATION IF EXISTS `+ident(cfg.Publication)); err != nil {
		return fmt.Errorf("drop publication %s: %w", cfg.Publication, err)
	}
	return nil
}
