package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply/postgres"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

// Engine names the kind of server a connection URL points at.
type Engine string

const (
	EnginePostgres Engine = "postgres"
)

func EngineOf(rawURL string) (Engine, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "", fmt.Errorf("connection %q: want a URL such as postgres://user@host:5432/db", MaskURL(rawURL))
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return EnginePostgres, nil
	}
	return "", fmt.Errorf("connection %s: unsupported scheme %q (supported: postgres://)", MaskURL(rawURL), scheme)
}

// maskURL hides the password of a connection URL for logs and errors.
func MaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

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
			if t.Schema == "" {
				t.Schema = "public"
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
	URL          string
	Tables       []sluice.TableName
	PollInterval time.Duration
	Install      bool
	Logger       *slog.Logger
}

type reader interface {
	Tables() []*sluice.Table
	Read(ctx context.Context, max int) ([]sluice.Change, error)
	Ack(ctx context.Context, pos sluice.Position) error
	Close() error
}

func openSource(ctx context.Context, o sourceOptions, from sluice.Position) (reader, error) {
	eng, err := EngineOf(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	switch eng {
	case EnginePostgres:
		if !from.IsZero() && from.Kind != "pgtrigger" {
			return nil, fmt.Errorf("the checkpoint was written by a %q reader but the source is read with triggers; use a new --stream-id or the matching source mode", from.Kind)
		}
		return pgtrigger.Open(ctx, o.URL, pgtrigger.Config{
			Tables:       o.Tables,
			PollInterval: o.PollInterval,
			Install:      o.Install,
			Logger:       o.Logger,
		}, from)
	}
	return nil, fmt.Errorf("--source: %s sources are not supported yet", eng)
}

type targetOptions struct {
	URL    string
	Mode   string
	Logger *slog.Logger
}

type target interface {
	stream.Target
	Preflight(ctx context.Context, tables []*sluice.Table) error
	ReadCheckpoint(ctx context.Context, stream string) (sluice.Checkpoint, bool, error)
	Close(ctx context.Context) error
}

func openTarget(ctx context.Context, o targetOptions) (target, error) {
	eng, err := EngineOf(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	switch eng {
	case EnginePostgres:
		mode, err := postgres.ParseMode(o.Mode)
		if err != nil {
			return nil, fmt.Errorf("--apply-mode: %w", err)
		}
		return postgres.Open(ctx, o.URL, postgres.Config{Mode: mode, Logger: o.Logger})
	}
	return nil, fmt.Errorf("--target: %s targets are not supported yet", eng)
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
