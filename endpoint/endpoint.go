// Package endpoint opens sluice's two ends from their connection strings:
// it tells a string's engine, picks a source's reader (the source-mode
// rules), opens a source or a target (also check-only, or dialing through
// a given dialer), wraps a target in the cross-engine type map where its
// values need it, and runs a source's checks. The commands (daemon, verify,
// diagnose, preflight, the copy) all open their ends here, so that each
// opens them alike; the engines (apply/…, source/…) know nothing of it.
package endpoint

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/connstr"
)

// Engine names the kind of server a connection string points at.
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

// ParseTables reads the --tables list: names separated by commas, in one
// or more items, at least one.
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

// SourceTableNames is the stream's table list as its reader names the
// tables: a PostgreSQL source's table named without a schema is in public.
func SourceTableNames(eng Engine, list []sluice.TableName) []sluice.TableName {
	out := slices.Clone(list)
	for i := range out {
		if eng == EnginePostgres && out[i].Schema == "" {
			out[i].Schema = "public"
		}
	}
	return out
}
