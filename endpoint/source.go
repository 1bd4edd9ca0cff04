package endpoint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
)

// Source modes: how a source is read.
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

// DefaultMode is the engine's log-based reader: logical on PostgreSQL,
// binlog on MySQL; "" for another engine.
func DefaultMode(eng Engine) string {
	return map[Engine]string{EnginePostgres: ModeLogical, EngineMySQL: ModeBinlog}[eng]
}

// ResolveMode picks the reader: the one that wrote the checkpoint when
// there is one (from), else the requested mode, else the engine's
// log-based reader.
func ResolveMode(eng Engine, mode string, from sluice.Position) (string, error) {
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
		mode = DefaultMode(eng)
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

// SourceOptions say how to open a source.
type SourceOptions struct {
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
	// (zero: source.DefaultBufferBytes).
	BufferBytes int64
	Logger      *slog.Logger
}

// Reader is a source's reader, as OpenSource returns it.
type Reader interface {
	Tables() []*sluice.Table
	// Start is the position the reader started from: its resume position,
	// or where a reader opened without one starts reading.
	Start() sluice.Position
	Read(ctx context.Context, max int) ([]sluice.Change, error)
	Ack(ctx context.Context, pos sluice.Position) error
	Close() error
}

// NoStartError says a log-read stream has no checkpoint and no --from-now:
// nothing says where it starts. It is a usage error, not the source's.
type NoStartError struct {
	Stream, Mode string
}

func (e *NoStartError) Error() string {
	return fmt.Sprintf("stream %s has no checkpoint, --initial-copy is off and --from-now is not given, and the source is read from its %s: "+
		"nothing says where the stream starts; let sluice copy the tables' rows first (--initial-copy auto, the default), "+
		"or, if the target already holds the source's rows from a consistent dump, start with --from-now to stream every change committed from now on",
		e.Stream, map[string]string{ModeLogical: "WAL (logical replication)", ModeBinlog: "binary log"}[e.Mode])
}

// OpenSource opens the source's reader at from (zero: a new stream). A
// log reader with neither a position nor FromNow is refused with a
// *NoStartError.
func OpenSource(ctx context.Context, o SourceOptions, from sluice.Position) (Reader, error) {
	eng, err := EngineOf(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	explicit := o.Mode != "" && o.Mode != "auto"
	mode, err := ResolveMode(eng, o.Mode, from)
	if err != nil {
		return nil, err
	}
	if mode != ModeTrigger && from.IsZero() && !o.FromNow {
		return nil, &NoStartError{Stream: o.Stream, Mode: mode}
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

// CheckSource runs the source's checks for reading it in mode (resolved,
// see ResolveMode), changing nothing: what the reader would need, and the
// tables and foreign keys as it would see them. A trigger source is
// checked as one whose capture sync start would install.
func CheckSource(ctx context.Context, eng Engine, mode string, o SourceOptions) (source.Report, error) {
	switch {
	case mode == ModeLogical && eng == EnginePostgres:
		return pglogical.Check(ctx, o.URL, pglogical.Config{Tables: o.Tables, Stream: o.Stream, Logger: o.Logger})
	case mode == ModeBinlog && eng == EngineMySQL:
		return binlog.Check(ctx, o.URL, binlog.Config{Tables: o.Tables, Logger: o.Logger})
	case mode == ModeTrigger && eng == EnginePostgres:
		return pgtrigger.Check(ctx, o.URL, pgtrigger.Config{Tables: o.Tables, Stream: o.Stream, Install: true, Logger: o.Logger})
	case mode == ModeTrigger && eng == EngineMySQL:
		return mytrigger.Check(ctx, o.URL, mytrigger.Config{Tables: o.Tables, Stream: o.Stream, Install: true, Logger: o.Logger})
	}
	return source.Report{}, &ModeError{Mode: mode, Engine: eng}
}

// ModeError says a source mode does not apply to the source's engine.
type ModeError struct {
	Mode   string
	Engine Engine
}

func (e *ModeError) Error() string {
	return fmt.Sprintf("--source-mode %s does not apply to a %s source", e.Mode, e.Engine)
}
