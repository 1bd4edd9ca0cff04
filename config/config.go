// Package config is sluice's configuration file: its format, its merging
// with command-line flags and environment variables, its validation, and
// the reading of secrets.
//
// The file is TOML. TOML is typed (a number is a number, "15s" is a
// string the file format does not reinterpret), allows comments, has no
// indentation to get wrong (unlike YAML, where a misplaced space silently
// moves a key to another table, and "no" or "off" may become a boolean),
// and is a common format for daemons' configuration files.
//
// A file holds daemon-wide settings and defaults for every stream at the
// top level, and a [[stream]] list; a key in a [[stream]] overrides the
// top-level one for that stream:
//
//	state_dir   = "/var/lib/sluice"
//	kill_budget = "5s"
//	target      = "postgres://sluice@replica:5432/shop"
//	target_password_file = "/etc/sluice/target.password"
//
//	[[stream]]
//	stream_id = "orders"
//	source    = "postgres://app@db1:5432/shop"
//	tables    = ["public.orders", "public.order_lines"]
//
//	[[stream]]
//	stream_id = "billing"
//	source    = "mysql://app@db2:3306/billing"
//	tables    = ["invoices"]
//
// Every key is the snake_case name of a `sluice sync start` flag. The
// effective value of a setting is, by precedence: the command-line flag,
// then its SLUICE_… environment variable (both apply to every stream), then
// the stream's key, then the file's top-level key, then the flag's default.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Duration is a time.Duration written as a string in the file ("15s").
type Duration time.Duration

// UnmarshalText parses a Go duration ("200ms", "2m").
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil && IsBareNumber(string(b)) {
		return fmt.Errorf("%q has no unit: write \"%ss\" (or ms, m, h)", b, b)
	}
	if err != nil {
		return fmt.Errorf("%w (want a string such as \"15s\", \"200ms\", \"2m\")", err)
	}
	*d = Duration(v)
	return nil
}

// IsBareNumber is true for "5" or "1.5": a duration without its unit, which
// the flag parser and the file reader both answer with "write 5s".
func IsBareNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return true
}

// Settings is one level of the file: the top level or a [[stream]]. A nil
// field is not set at that level. The toml tag of each field is its key,
// the snake_case of the flag's name.
type Settings struct {
	StreamID            *string   `toml:"stream_id"`
	Source              *string   `toml:"source"`
	SourcePasswordFile  *string   `toml:"source_password_file"`
	Target              *string   `toml:"target"`
	TargetPasswordFile  *string   `toml:"target_password_file"`
	Tables              []string  `toml:"tables"`
	StateDir            *string   `toml:"state_dir"`
	SourceMode          *string   `toml:"source_mode"`
	FromNow             *bool     `toml:"from_now"`
	InitialCopy         *string   `toml:"initial_copy"`
	CreateTables        *string   `toml:"create_tables"`
	SchemaChanges       *string   `toml:"schema_changes"`
	CopyWorkers         *int      `toml:"copy_workers"`
	CopyChunkRows       *int      `toml:"copy_chunk_rows"`
	ApplyBatchSize      *int      `toml:"apply_batch_size"`
	NoAutoTune          *bool     `toml:"no_auto_tune"`
	ApplyMode           *string   `toml:"apply_mode"`
	MultiStatements     *string   `toml:"multi_statements"`
	DisableFKChecks     *bool     `toml:"disable_fk_checks"`
	AllowCollationMerge *bool     `toml:"allow_collation_merge"`
	Controller          *string   `toml:"controller"`
	MinLanes            *int      `toml:"min_lanes"`
	MaxLanes            *int      `toml:"max_lanes"`
	NoOverlap           *bool     `toml:"no_overlap"`
	StallRatio          *float64  `toml:"stall_ratio"`
	StallWindow         *Duration `toml:"stall_window"`
	ExitOnStall         *bool     `toml:"exit_on_stall"`
	KillBudget          *Duration `toml:"kill_budget"`
	TargetTxTimeout     *Duration `toml:"target_tx_timeout"`
	MaxBatchBytes       *int64    `toml:"max_batch_bytes"`
	PollInterval        *Duration `toml:"poll_interval"`
	MaxQueueBytes       *int64    `toml:"max_queue_bytes"`
	ShutdownTimeout     *Duration `toml:"shutdown_timeout"`
	TransientRetryFor   *Duration `toml:"transient_retry_for"`
	MetricsListen       *string   `toml:"metrics_listen"`
	LogLevel            *string   `toml:"log_level"`
	LogFormat           *string   `toml:"log_format"`
	// The health checks of what the source keeps for the stream.
	HealthInterval       *Duration `toml:"health_interval"`
	SlotWALLimit         *int64    `toml:"slot_wal_limit"`
	SlotInactiveWarn     *Duration `toml:"slot_inactive_warn"`
	BinlogPurgeWarn      *Duration `toml:"binlog_purge_warn"`
	BinlogPurgeWarnFiles *int      `toml:"binlog_purge_warn_files"`
}

// daemonWide are the keys that belong to the process, not to one stream:
// they may be set only at the top level.
var daemonWide = []string{"state_dir", "metrics_listen", "log_level", "log_format"}

// File is a parsed configuration file.
type File struct {
	Path    string
	Top     Settings
	Streams []Settings
}

type fileFormat struct {
	Settings
	Stream []Settings `toml:"stream"`
}

// Load reads and parses a file. Unknown keys are an error naming the key
// and its line.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, string(b))
}

// Parse parses the text of a file; path names it in errors.
func Parse(path, text string) (*File, error) {
	var ff fileFormat
	md, err := toml.Decode(text, &ff)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			key := ""
			if pe.LastKey != "" {
				key = fmt.Sprintf(" key %q:", pe.LastKey)
			}
			return nil, fmt.Errorf("config %s: line %d:%s %s", path, pe.Position.Line, key, pe.Message)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		var msgs []string
		done := map[string]bool{}
		for _, k := range und {
			if done[k.String()] {
				continue
			}
			done[k.String()] = true
			where := ""
			if lines := keyLines(text, k[len(k)-1]); len(lines) > 0 {
				where = "line " + strings.Join(lines, ", ") + ": "
			}
			hint := ""
			if best := closest(k[len(k)-1], Keys()); best != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", best)
			}
			msgs = append(msgs, fmt.Sprintf("%sunknown key %q%s", where, k.String(), hint))
		}
		return nil, fmt.Errorf("config %s: %s (keys are the snake_case names of the sync start flags, e.g. apply_batch_size)", path, strings.Join(msgs, "; "))
	}
	for i, s := range ff.Stream {
		for _, k := range daemonWide {
			if isSet(s, k) {
				return nil, fmt.Errorf("config %s: [[stream]] #%d (%s): %s is daemon-wide: set it at the top level", path, i+1, streamName(s, i), k)
			}
		}
	}
	return &File{Path: path, Top: ff.Settings, Streams: ff.Stream}, nil
}

// keyLines finds the lines that assign key (toml.MetaData does not say
// where a key is).
func keyLines(text, key string) []string {
	var out []string
	for i, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(l, key); ok {
			if r := strings.TrimSpace(rest); strings.HasPrefix(r, "=") {
				out = append(out, fmt.Sprint(i+1))
			}
		} else if rest, ok := strings.CutPrefix(l, `"`+key+`"`); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
			out = append(out, fmt.Sprint(i+1))
		}
	}
	return out
}

func streamName(s Settings, i int) string {
	if s.StreamID != nil && *s.StreamID != "" {
		return *s.StreamID
	}
	return fmt.Sprintf("stream #%d", i+1)
}

// field returns the Settings field whose key is key.
func field(s *Settings, key string) reflect.Value {
	v := reflect.ValueOf(s).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("toml") == key {
			return v.Field(i)
		}
	}
	panic("config: no key " + key)
}

func isSet(s Settings, key string) bool { return !field(&s, key).IsNil() }

// Keys returns every key of the file format, in the order of Settings.
func Keys() []string {
	t := reflect.TypeFor[Settings]()
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i] = t.Field(i).Tag.Get("toml")
	}
	return keys
}

// FlagName is the command-line flag of a key: apply_batch_size →
// apply-batch-size.
func FlagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// Flags is what the merge needs of the command line; *cli.Context (urfave
// cli v2) has it. IsSet is true when the flag was given or its environment
// variable is set; the getters return the flag's default otherwise.
type Flags interface {
	IsSet(name string) bool
	String(name string) string
	StringSlice(name string) []string
	Bool(name string) bool
	Int(name string) int
	Int64(name string) int64
	Float64(name string) float64
	Duration(name string) time.Duration
}

// Stream is a stream's effective settings.
type Stream struct {
	StreamID            string
	Source              string
	SourcePasswordFile  string
	Target              string
	TargetPasswordFile  string
	Tables              []string
	StateDir            string
	SourceMode          string
	FromNow             bool
	InitialCopy         string
	CreateTables        string
	SchemaChanges       string
	CopyWorkers         int
	CopyChunkRows       int
	ApplyBatchSize      int
	NoAutoTune          bool
	ApplyMode           string
	MultiStatements     string
	DisableFKChecks     bool
	AllowCollationMerge bool
	Controller          string
	MinLanes            int
	MaxLanes            int
	NoOverlap           bool
	StallRatio          float64
	StallWindow         time.Duration
	ExitOnStall         bool
	KillBudget          time.Duration
	TargetTxTimeout     time.Duration
	MaxBatchBytes       int64
	PollInterval        time.Duration
	MaxQueueBytes       int64
	ShutdownTimeout     time.Duration
	TransientRetryFor   time.Duration
	MetricsListen       string
	LogLevel            string
	LogFormat           string
	// Health checks (same order as Settings).
	HealthInterval       time.Duration
	SlotWALLimit         int64
	SlotInactiveWarn     time.Duration
	BinlogPurgeWarn      time.Duration
	BinlogPurgeWarnFiles int
}

// Resolve merges flags (and their environment variables), the file and the
// defaults into each stream's effective settings: flag/env > the stream's
// key > the top-level key > the flag's default. With no file, or a file
// without [[stream]], there is one stream. Resolve validates the result.
func Resolve(f *File, flags Flags) ([]Stream, error) {
	var top Settings
	streams := []Settings{{}}
	where := ""
	if f != nil {
		top = f.Top
		if len(f.Streams) > 0 {
			streams = f.Streams
		}
		where = f.Path
	}
	out := make([]Stream, len(streams))
	for i, s := range streams {
		ev := reflect.ValueOf(&out[i]).Elem()
		for j, key := range Keys() {
			dst := ev.Field(j)
			name := FlagName(key)
			if flags.IsSet(name) {
				setFromFlag(dst, flags, name)
				continue
			}
			src := field(&s, key)
			if src.IsNil() {
				src = field(&top, key)
			}
			if src.IsNil() {
				setFromFlag(dst, flags, name) // the default
				continue
			}
			if src.Kind() == reflect.Slice {
				dst.Set(src)
			} else {
				dst.Set(src.Elem().Convert(dst.Type()))
			}
		}
	}
	return out, Validate(where, out)
}

func setFromFlag(dst reflect.Value, flags Flags, name string) {
	switch dst.Interface().(type) {
	case string:
		dst.SetString(flags.String(name))
	case []string:
		dst.Set(reflect.ValueOf(flags.StringSlice(name)))
	case bool:
		dst.SetBool(flags.Bool(name))
	case int:
		dst.SetInt(int64(flags.Int(name)))
	case int64:
		dst.SetInt(flags.Int64(name))
	case float64:
		dst.SetFloat(flags.Float64(name))
	case time.Duration:
		dst.SetInt(int64(flags.Duration(name)))
	default:
		panic("config: unhandled type of " + name)
	}
}

// Validate checks that every stream has a source, a target and tables,
// that stream ids are unique, and that daemon-wide settings agree.
func Validate(where string, streams []Stream) error {
	var errs []string
	seen := map[string]int{}
	for i, s := range streams {
		name := s.StreamID
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		var missing []string
		if s.Source == "" {
			missing = append(missing, "source")
		}
		if s.Target == "" {
			missing = append(missing, "target")
		}
		if len(s.Tables) == 0 {
			missing = append(missing, "tables")
		}
		if err := s.Check(); err != nil {
			errs = append(errs, err.Error())
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Sprintf("stream %s: missing %s (flags --%s, or keys %s in a config file)", name, strings.Join(missing, ", "), strings.Join(missing, ", --"), strings.Join(missing, ", ")))
		}
		if s.StreamID == "" {
			errs = append(errs, fmt.Sprintf("stream %s: stream_id is empty", name))
		} else if j, dup := seen[s.StreamID]; dup {
			errs = append(errs, fmt.Sprintf("stream id %q is used by streams #%d and #%d: each stream needs its own (stream_id)", s.StreamID, j+1, i+1))
		} else {
			seen[s.StreamID] = i
		}
	}
	errs = append(errs, checkSet(streams)...)
	if len(errs) > 0 {
		if where == "" {
			return errors.New(strings.Join(errs, "\n"))
		}
		return fmt.Errorf("%s: %s", where, strings.Join(errs, "\n"))
	}
	return nil
}

// Masked returns the effective settings as key = value lines, sorted as in
// the file format, with the passwords of connection strings masked by mask.
func (s Stream) Masked(mask func(string) string) []string {
	ev := reflect.ValueOf(s)
	var lines []string
	for j, key := range Keys() {
		v := ev.Field(j).Interface()
		var txt string
		switch x := v.(type) {
		case string:
			if key == "source" || key == "target" {
				x = mask(x)
			}
			txt = fmt.Sprintf("%q", x)
		case []string:
			q := make([]string, len(x))
			for i := range x {
				q[i] = fmt.Sprintf("%q", x[i])
			}
			txt = "[" + strings.Join(q, ", ") + "]"
		case time.Duration:
			txt = fmt.Sprintf("%q", x.String())
			switch {
			case x == 0 && key == "kill_budget":
				txt += "  # a quarter of target_tx_timeout"
			case x == 0 && key == "target_tx_timeout":
				txt += "  # detected from the target at start (Vitess 20s, its own limit, else 60s)"
			}
		default:
			txt = fmt.Sprint(x)
		}
		lines = append(lines, key+" = "+txt)
	}
	return lines
}
