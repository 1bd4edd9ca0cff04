package config

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connstr"
)

// Check is the offline validation of a stream's effective settings: every
// value, range and enum, the connection strings' form, and the stream id.
// It connects to nothing, and `sync start`, `config check`, `source
// install` and `diagnose` run it before they connect or install, so that
// `config check` accepts exactly what `sync start` would. Each problem
// names the setting (as its flag), the value, the rule and the fix; a
// connection string is never printed, only the setting's name. It returns
// every problem, joined.
func (s Stream) Check() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(CheckStreamID(s.StreamID))
	if s.Source != "" {
		add(CheckConn("source", s.Source))
	}
	if s.Target != "" {
		add(CheckConn("target", s.Target))
	}
	add(CheckSourceMode(s.SourceMode, true))
	add(oneOf("apply-mode", s.ApplyMode, "pipelined", "per-row"))
	add(oneOf("initial-copy", s.InitialCopy, "auto", "on", "off"))
	add(oneOf("create-tables", s.CreateTables, "on", "off"))
	add(oneOf("schema-changes", s.SchemaChanges, "follow", "stop"))
	if s.InitialCopy == "on" && s.FromNow {
		add(fmt.Errorf("--initial-copy on and --from-now contradict each other: the copy hands off to the stream at the snapshot's position, --from-now starts at the source's current one; drop --from-now to copy, or use --initial-copy=off --from-now when the target already holds the rows"))
	}
	if s.CopyWorkers < 1 {
		add(fmt.Errorf("--copy-workers %d: must be at least 1: give the number of chunks copied at once, e.g. --copy-workers 4", s.CopyWorkers))
	}
	if s.CopyChunkRows < 1 {
		add(fmt.Errorf("--copy-chunk-rows %d: must be at least 1: give the rows per copy chunk (one target transaction), e.g. --copy-chunk-rows 50000", s.CopyChunkRows))
	}
	add(oneOf("multi-statements", s.MultiStatements, "auto", "on", "off"))
	add(oneOf("controller", s.Controller, "model", "aimd"))
	add(oneOf("log-level", strings.ToLower(s.LogLevel), "debug", "info", "warn", "error"))
	add(oneOf("log-format", s.LogFormat, "auto", "text", "json"))
	if s.ApplyBatchSize < 1 {
		add(fmt.Errorf("--apply-batch-size %d: must be at least 1: give the number of changes per target transaction, e.g. --apply-batch-size 1000", s.ApplyBatchSize))
	}
	if s.MinLanes < 1 {
		add(fmt.Errorf("--min-lanes %d: must be at least 1: give the fewest concurrent target connections, e.g. --min-lanes 1", s.MinLanes))
	}
	if s.MaxLanes < 1 {
		add(fmt.Errorf("--max-lanes %d: must be at least 1: give the most concurrent target connections, e.g. --max-lanes 16", s.MaxLanes))
	}
	if s.MinLanes >= 1 && s.MaxLanes >= 1 && s.MinLanes > s.MaxLanes {
		add(fmt.Errorf("--min-lanes %d is more than --max-lanes %d: --min-lanes must be at most --max-lanes; raise --max-lanes or lower --min-lanes", s.MinLanes, s.MaxLanes))
	}
	if !(s.StallRatio > 0 && s.StallRatio < 1) {
		add(fmt.Errorf("--stall-ratio %g: must be between 0 and 1 (exclusive), a fraction of the source's change rate, e.g. --stall-ratio 0.1", s.StallRatio))
	}
	add(positive("stall-window", s.StallWindow, "2m"))
	add(positive("poll-interval", s.PollInterval, "200ms"))
	add(positive("shutdown-timeout", s.ShutdownTimeout, "30s"))
	add(notNegative("transient-retry-for", s.TransientRetryFor, "5m"))
	add(notNegative("kill-budget", s.KillBudget, "5s"))
	add(notNegative("target-tx-timeout", s.TargetTxTimeout, "20s"))
	if s.KillBudget > 0 && s.TargetTxTimeout > 0 && s.KillBudget >= s.TargetTxTimeout {
		add(fmt.Errorf("--kill-budget %s is not less than --target-tx-timeout %s: the budget must leave room under the target's kill timeout; set --kill-budget to a quarter of it, e.g. %s", s.KillBudget, s.TargetTxTimeout, s.TargetTxTimeout/4))
	}
	if s.MaxBatchBytes < 0 {
		add(fmt.Errorf("--max-batch-bytes %d: must not be negative: give bytes, e.g. --max-batch-bytes 16777216 (0: only --max-queue-bytes bounds a batch)", s.MaxBatchBytes))
	}
	if s.MaxQueueBytes < 1 {
		add(fmt.Errorf("--max-queue-bytes %d: must be at least 1: give bytes, e.g. --max-queue-bytes 33554432", s.MaxQueueBytes))
	}
	// The health settings' zero is their default.
	add(notNegative("health-interval", s.HealthInterval, "30s"))
	add(notNegative("slot-inactive-warn", s.SlotInactiveWarn, "10m"))
	add(notNegative("binlog-purge-warn", s.BinlogPurgeWarn, "24h"))
	if s.SlotWALLimit < 0 {
		add(fmt.Errorf("--slot-wal-limit %d: must not be negative: give bytes, e.g. --slot-wal-limit 1073741824 (the retained WAL the slot warnings are fractions of where the server sets no max_slot_wal_keep_size)", s.SlotWALLimit))
	}
	if s.BinlogPurgeWarnFiles < 0 {
		add(fmt.Errorf("--binlog-purge-warn-files %d: must not be negative: give a count of binlogs, e.g. --binlog-purge-warn-files 2 (0: no warning by count)", s.BinlogPurgeWarnFiles))
	}
	if s.NoAutoTune && s.ApplyBatchSize < 1 {
		add(fmt.Errorf("--no-auto-tune needs --apply-batch-size N (N ≥ 1)"))
	}
	if s.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(s.MetricsListen); err != nil {
			add(fmt.Errorf("--metrics-listen %q: want host:port, e.g. 127.0.0.1:9187", s.MetricsListen))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	if s.StreamID == "" {
		return errors.Join(errs...)
	}
	return fmt.Errorf("stream %s: %w", s.StreamID, errors.Join(errs...))
}

func oneOf(flag, v string, valid ...string) error {
	for _, w := range valid {
		if v == w {
			return nil
		}
	}
	hint := ""
	if best := closest(v, valid); best != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Errorf("--%s %q: want %s%s", flag, v, orList(valid), hint)
}

func orList(vs []string) string {
	if len(vs) == 1 {
		return vs[0]
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

func positive(flag string, d time.Duration, example string) error {
	if d <= 0 {
		return fmt.Errorf("--%s %s: must be more than 0: give a duration with its unit, e.g. --%s %s", flag, d, flag, example)
	}
	return nil
}

func notNegative(flag string, d time.Duration, example string) error {
	if d < 0 {
		return fmt.Errorf("--%s %s: must not be negative: give a duration with its unit, e.g. --%s %s (0 or unset: the default)", flag, d, flag, example)
	}
	return nil
}

// CheckSourceMode checks --source-mode; auto is allowed where the command
// picks a reader itself.
func CheckSourceMode(mode string, auto bool) error {
	valid := []string{"logical", "binlog", "trigger"}
	if auto {
		valid = append([]string{"auto"}, valid...)
	}
	return oneOf("source-mode", mode, valid...)
}

// streamIDRe is the charset of a stream id: it names a checkpoint record,
// environment variables (SLUICE_<ID>_SOURCE_PASSWORD), the PostgreSQL
// replication slot and publication (sluice_<id>, 63 bytes at most) and
// systemd credentials.
var streamIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// maxStreamID keeps sluice_<id> within PostgreSQL's 63-byte names.
const maxStreamID = 63 - len("sluice_")

// CheckStreamID checks a stream id's charset and length.
func CheckStreamID(id string) error {
	switch {
	case id == "":
		return errors.New("--stream-id is empty: name the stream, e.g. --stream-id orders (stream_id in a config file)")
	case len(id) > maxStreamID:
		return fmt.Errorf("--stream-id %q: %d characters, at most %d allowed (it names the replication slot sluice_<id>): choose a shorter id", id, len(id), maxStreamID)
	case !streamIDRe.MatchString(id):
		return fmt.Errorf("--stream-id %q: only letters, digits, '.', '-' and '_' are allowed, starting with a letter or digit: e.g. --stream-id eu-orders", id)
	}
	return nil
}

// Engine is what a connection string names: "postgres" or "mysql".
type Engine string

// The engines sluice reads and writes.
const (
	EnginePostgres Engine = "postgres"
	EngineMySQL    Engine = "mysql"
)

// ConnEngine tells the engine of a connection string from its form alone:
// a postgres:// or postgresql:// URL or a PostgreSQL key=value string; a
// mysql:// or mariadb:// URL or a MySQL DSN (user:pass@tcp(host:3306)/db).
// Its errors name the setting, never the string, which may hold a password.
func ConnEngine(setting, conn string) (Engine, error) {
	fix := fmt.Sprintf("want postgres://user@host:5432/db, a PostgreSQL key=value string (host=… dbname=…), mysql://user@host:3306/db or a MySQL DSN user@tcp(host:3306)/db; pass the password with --%s-password-file", setting)
	if setting != "source" && setting != "target" {
		fix = "want postgres://user@host:5432/db, a PostgreSQL key=value string (host=… dbname=…), mysql://user@host:3306/db or a MySQL DSN user@tcp(host:3306)/db"
	}
	if strings.TrimSpace(conn) == "" {
		return "", fmt.Errorf("--%s is empty: %s", setting, fix)
	}
	// The form is told by connstr, as the daemon tells it when it
	// connects: config check must refuse what sync start would.
	form, err := connstr.FormOf(conn)
	scheme, rest, isURL := strings.Cut(conn, "://")
	isURL = isURL && !strings.ContainsAny(scheme, "@:/()= ")
	isDSN := strings.Contains(conn, "@tcp(") || strings.Contains(conn, "@unix(") || strings.HasPrefix(conn, "tcp(") || strings.HasPrefix(conn, "unix(")
	if err != nil {
		switch {
		case isURL && form == connstr.Unknown && !knownScheme(scheme):
			return "", fmt.Errorf("--%s: the scheme %q is not a database sluice supports (PostgreSQL, MySQL, MariaDB): %s", setting, scheme, fix)
		case isDSN && !strings.Contains(conn, "/"):
			return "", fmt.Errorf("--%s: the MySQL DSN has no /database after the address: %s", setting, fix)
		case errors.Is(err, connstr.ErrUnparseable):
			return "", fmt.Errorf("--%s: not a connection string sluice can read: %s", setting, fix)
		}
		return "", fmt.Errorf("--%s: %w", setting, err) // connstr's errors never echo the string
	}
	eng := Engine(form.Engine())
	switch form {
	case connstr.PostgresURL, connstr.MySQLURL:
		// The authority must be there and its port a number; the path
		// names the database.
		auth, _, _ := strings.Cut(rest, "/")
		if i := strings.LastIndex(auth, "@"); i >= 0 {
			auth = auth[i+1:]
		}
		if auth == "" && eng == EngineMySQL { // libpq reads postgres:///db as the local socket
			return "", fmt.Errorf("--%s: the %s URL has no host: %s", setting, scheme, fix)
		}
		if strings.Contains(auth, ",") { // multi-host postgres URLs
			return eng, nil
		}
		if _, port, err := net.SplitHostPort(auth); err == nil && !isPort(port) {
			return "", fmt.Errorf("--%s: the %s URL's port is not a number from 1 to 65535: %s", setting, scheme, fix)
		}
	case connstr.MySQLDSN:
		if !strings.Contains(conn, "/") {
			return "", fmt.Errorf("--%s: the MySQL DSN has no /database after the address: %s", setting, fix)
		}
	}
	return eng, nil
}

func knownScheme(s string) bool {
	switch strings.ToLower(s) {
	case "postgres", "postgresql", "mysql", "mariadb":
		return true
	}
	return false
}

func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
		n = n*10 + int(r-'0')
	}
	return n >= 1 && n <= 65535
}

// CheckConn checks a connection string's form (see ConnEngine).
func CheckConn(setting, conn string) error {
	_, err := ConnEngine(setting, conn)
	return err
}

// checkSet checks what the streams of one process must agree on or keep
// apart: their ids, and the environment variables and replication slot
// names derived from them.
func checkSet(streams []Stream) []string {
	var errs []string
	byEnv := map[string]string{}
	for _, s := range streams {
		if s.StreamID == "" || CheckStreamID(s.StreamID) != nil {
			continue
		}
		env := EnvName(s.StreamID, "source")
		if other, ok := byEnv[env]; ok && other != s.StreamID {
			errs = append(errs, fmt.Sprintf("stream ids %q and %q both map to %s (and to one replication slot name): rename one of the streams", other, s.StreamID, env))
			continue
		}
		byEnv[env] = s.StreamID
	}
	if len(streams) > 1 {
		for _, s := range streams[1:] {
			if s.StateDir != streams[0].StateDir {
				errs = append(errs, fmt.Sprintf("streams %s and %s name different state dirs (%s, %s): one process keeps one state dir; set state_dir at the top level", streams[0].StreamID, s.StreamID, streams[0].StateDir, s.StateDir))
				break
			}
		}
	}
	return errs
}

// levenshtein is the edit distance between a and b, counting a swap of
// two adjacent characters as one edit ("strat" is 1 from "start").
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// closest is the candidate nearest to s, when it is near enough to be a
// typo (at most a third of its length away, and at least 1 edit allowed).
func closest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := levenshtein(strings.ToLower(s), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if s == "" || bestD < 0 || bestD > max(1, len([]rune(s))/3) {
		return ""
	}
	return best
}

// Closest is the candidate nearest to s, or "" when none is near enough
// to be a typo of it.
func Closest(s string, candidates []string) string { return closest(s, candidates) }
