package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	mysqltarget "github.com/sluice-cdc/sluice/apply/mysql"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/apply/typemap"
	"github.com/sluice-cdc/sluice/connstr"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

// Engine names the kind of server a connection URL points at.
type Engine string

const (
	EnginePostgres Engine = "postgres"
	EngineMySQL    Engine = "mysql"
)

// EngineOf tells the engine from a connection string: a postgres:// or
// postgresql:// URL, a PostgreSQL key=value string (host=… dbname=…), a
// mysql:// (or mariadb://) URL, or a go-sql-driver DSN such as
// user:pass@tcp(host:3306)/db. Its errors never echo the string.
func EngineOf(rawURL string) (Engine, error) {
	f, err := connstr.FormOf(rawURL)
	if err != nil {
		return "", fmt.Errorf("connection %s: %w", connstr.Mask(rawURL), err)
	}
	return Engine(f.Engine()), nil
}

// MaskURL hides the password of a connection string for logs and errors
// (see connstr.Mask): a string that does not parse is redacted whole.
func MaskURL(raw string) string { return connstr.Mask(raw) }

func ParseTables(list []string) ([]sluice.TableName, error) {
	var out []sluice.TableName
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			t, err := sluice.ParseTableName(s)
			if err != nil {
				return nil, fmt.Errorf("--tables: %w", err)
			}
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--tables: name at least one table, e.g. --tables public.orders,public.customers")
	}
	return out, nil
}

type sourceOptions struct {
	URL string
	// Mode is how the source is read: "trigger", "logical" (PostgreSQL),
	// "binlog" (MySQL), or "auto"/"" for the engine's log-based reader.
	Mode         string
	Stream       string
	Tables       []sluice.TableName
	PollInterval time.Duration
	// Progress is the log readers' progress-marker interval (zero: their
	// defaults).
	Progress time.Duration
	Install  bool
	// FromNow lets a log-based reader start a stream that has no
	// checkpoint at the source's current position.
	FromNow bool
	// OldCheckpoint says the position comes from a checkpoint written by a
	// sluice before lanes kept checkpoints of their own, which moved an
	// idle PostgreSQL slot past its checkpoint.
	OldCheckpoint bool
	// BufferBytes bounds what a log reader decodes ahead of the stream
	// (zero: source.DefaultBufferBytes); see ReadAheadBytes.
	BufferBytes int64
	Logger      *slog.Logger
}

type reader interface {
	Tables() []*sluice.Table
	// Start is the position the reader started from: its resume position,
	// or where a reader opened without one starts reading.
	Start() sluice.Position
	Read(ctx context.Context, max int) ([]sluice.Change, error)
	Ack(ctx context.Context, pos sluice.Position) error
	Close() error
}

// Source modes.
const (
	ModeTrigger = "trigger"
	ModeLogical = "logical"
	ModeBinlog  = "binlog"
)

// modeOfKind is the source mode that writes positions of a reader kind.
var modeOfKind = map[string]string{
	pgtrigger.Kind: ModeTrigger, mytrigger.Kind: ModeTrigger,
	pglogical.Kind: ModeLogical, binlog.Kind: ModeBinlog,
}

// resolveMode picks the reader: the one that wrote the checkpoint when
// there is one, else the requested mode, else the engine's log-based
// reader.
func resolveMode(eng Engine, mode string, from sluice.Position) (string, error) {
	if !from.IsZero() {
		m, ok := modeOfKind[from.Kind]
		if !ok {
			return "", fmt.Errorf("stream checkpoint position %s was written by an unknown reader %q", from, from.Kind)
		}
		if mode != "" && mode != "auto" && mode != m {
			return "", fmt.Errorf("stream checkpoint was written in --source-mode %s but --source-mode %s was asked for: a stream cannot switch readers (positions differ); use a new --stream-id", m, mode)
		}
		mode = m
	}
	if mode == "" || mode == "auto" {
		mode = map[Engine]string{EnginePostgres: ModeLogical, EngineMySQL: ModeBinlog}[eng]
	}
	switch {
	case mode == ModeTrigger:
	case mode == ModeLogical && eng != EnginePostgres, mode == ModeBinlog && eng != EngineMySQL:
		return "", fmt.Errorf("--source-mode %s does not apply to a %s source (PostgreSQL: logical or trigger; MySQL: binlog or trigger)", mode, eng)
	case mode != ModeLogical && mode != ModeBinlog:
		return "", fmt.Errorf("--source-mode %q: want auto, logical, binlog or trigger", mode)
	}
	return mode, nil
}

func openSource(ctx context.Context, o sourceOptions, from sluice.Position) (reader, error) {
	eng, err := EngineOf(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	explicit := o.Mode != "" && o.Mode != "auto"
	mode, err := resolveMode(eng, o.Mode, from)
	if err != nil {
		return nil, err
	}
	if mode != ModeTrigger && from.IsZero() && !o.FromNow {
		return nil, Fail(ExitUsage, fmt.Errorf("stream %s has no checkpoint, --initial-copy is off and --from-now is not given, and the source is read from its %s: "+
			"nothing says where the stream starts; let sluice copy the tables' rows first (--initial-copy auto, the default), "+
			"or, if the target already holds the source's rows from a consistent dump, start with --from-now to stream every change committed from now on",
			o.Stream, map[string]string{ModeLogical: "WAL (logical replication)", ModeBinlog: "binary log"}[mode]))
	}
	// A source that does not allow log-based reading gets a pointer to the
	// trigger reader, unless the user asked for the log reader by name.
	hint := func(err error) error {
		if err == nil || explicit || !from.IsZero() {
			return err
		}
		return fmt.Errorf("%w\n(sluice reads a %s source from its log by default; where that cannot be enabled, --source-mode trigger captures changes with triggers instead)", err, eng)
	}
	switch mode {
	case ModeLogical:
		r, err := pglogical.Open(ctx, o.URL, pglogical.Config{
			Tables: o.Tables, Stream: o.Stream, FromNow: o.FromNow, PollInterval: o.PollInterval, Logger: o.Logger,
			AcceptSlotAhead: o.OldCheckpoint, ProgressInterval: o.Progress, StatusInterval: o.Progress,
			BufferBytes: o.BufferBytes,
		}, from)
		if err != nil {
			return nil, hint(err)
		}
		return r, nil
	case ModeBinlog:
		r, err := binlog.Open(ctx, o.URL, binlog.Config{
			Tables: o.Tables, FromNow: o.FromNow, PollInterval: o.PollInterval, Logger: o.Logger,
			ProgressInterval: o.Progress, HeartbeatPeriod: o.Progress, BufferBytes: o.BufferBytes,
		}, from)
		if err != nil {
			return nil, hint(err)
		}
		return r, nil
	}
	switch eng {
	case EnginePostgres:
		return pgtrigger.Open(ctx, o.URL, pgtrigger.Config{
			Stream:       o.Stream,
			Tables:       o.Tables,
			PollInterval: o.PollInterval,
			Install:      o.Install,
			Logger:       o.Logger,
		}, from)
	case EngineMySQL:
		return mytrigger.Open(ctx, o.URL, mytrigger.Config{
			Stream:       o.Stream,
			Tables:       o.Tables,
			PollInterval: o.PollInterval,
			Install:      o.Install,
			Logger:       o.Logger,
		}, from)
	}
	return nil, fmt.Errorf("--source: %s sources are not supported", eng)
}

type targetOptions struct {
	URL  string
	Mode string
	// SourceEngine is the source's engine: a target of another engine is
	// wrapped in the cross-engine type map.
	SourceEngine Engine
	// MultiStatements is "auto", "on" or "off" (MySQL targets).
	MultiStatements string
	// AllowCollationMerge accepts target key columns whose collation holds
	// as equal values the source keeps apart.
	AllowCollationMerge bool
	Logger              *slog.Logger
	// Prefetch is what the target reads in its setup round trip.
	Prefetch apply.Prefetch
}

// crossTarget is a target the cross-engine type map can wrap.
type crossTarget interface {
	target
	ColumnTypes(ctx context.Context, name sluice.TableName) (map[string]string, error)
}

type target interface {
	HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error)
	// TxTimeout is the target's limit on a transaction's time, and what
	// sets it; zero when it has none.
	TxTimeout(ctx context.Context) (time.Duration, string, error)
	// OldestTransaction describes the oldest open transaction on the
	// target besides the applier's, for a stall's diagnosis.
	OldestTransaction(ctx context.Context) (string, error)
	stream.Target
	Preflight(ctx context.Context, tables []*sluice.Table) error
	ReadCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error)
	ReadCheckpoints(ctx context.Context, stream string) ([]sluice.Checkpoint, error)
	ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error)
	Close(ctx context.Context) error
}

func openTarget(ctx context.Context, o targetOptions) (target, error) {
	eng, err := EngineOf(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	mode, err := apply.ParseMode(o.Mode)
	if err != nil {
		return nil, fmt.Errorf("--apply-mode: %w", err)
	}
	var tgt crossTarget
	switch eng {
	case EnginePostgres:
		t, err := postgres.Open(ctx, o.URL, postgres.Config{Mode: mode, AllowCollationMerge: o.AllowCollationMerge, Logger: o.Logger, Prefetch: o.Prefetch})
		if err != nil {
			return nil, err
		}
		tgt = t
	case EngineMySQL:
		cfg := mysqltarget.Config{Mode: mode, AllowCollationMerge: o.AllowCollationMerge, Logger: o.Logger, Prefetch: o.Prefetch}
		switch o.MultiStatements {
		case "", "auto":
		case "on", "off":
			on := o.MultiStatements == "on"
			cfg.MultiStatements = &on
		default:
			return nil, fmt.Errorf("--multi-statements %q: want auto, on or off", o.MultiStatements)
		}
		t, err := mysqltarget.Open(ctx, o.URL, cfg)
		if err != nil {
			return nil, err
		}
		tgt = t
	default:
		return nil, fmt.Errorf("--target: %s targets are not supported", eng)
	}
	if o.SourceEngine != "" && (o.SourceEngine != eng || eng == EngineMySQL) {
		return typemap.Wrap(tgt, typemap.Engine(o.SourceEngine), typemap.Engine(eng)), nil
	}
	return tgt, nil
}

// connectPostgres opens a plain connection for administrative commands.
func ConnectPostgres(ctx context.Context, rawURL string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", MaskURL(rawURL), err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// ConnectMySQL opens a pool for administrative commands on a MySQL or
// MariaDB server, from a URL or a DSN. It connects lazily: the first
// query says whether the server answers.
func ConnectMySQL(rawURL string) (*sql.DB, error) {
	cfg, err := mytrigger.ParseDSN(rawURL)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("MySQL connection %s: %w", MaskURL(rawURL), err)
	}
	return sql.OpenDB(connector), nil
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
	eng, err := EngineOf(sourceURL)
	if err != nil {
		return fmt.Errorf("--source: %w", err)
	}
	switch eng {
	case EnginePostgres:
		conn, err := ConnectPostgres(ctx, sourceURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return pg(conn)
	case EngineMySQL:
		db, err := ConnectMySQL(sourceURL)
		if err != nil {
			return err
		}
		defer db.Close()
		return my(db)
	}
	return fmt.Errorf("--source: %s sources are not supported", eng)
}

// sourceTableNames is the stream's table list as its reader names the
// tables: a PostgreSQL source's table named without a schema is in public.
func sourceTableNames(eng Engine, list []sluice.TableName) []sluice.TableName {
	out := slices.Clone(list)
	for i := range out {
		if eng == EnginePostgres && out[i].Schema == "" {
			out[i].Schema = "public"
		}
	}
	return out
}
