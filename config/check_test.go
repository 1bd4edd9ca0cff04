package config

import (
	"strings"
	"testing"
	"time"
)

func goodStream() Stream {
	return Stream{
		StreamID: "orders", Source: "postgres://app:secret@db1:5432/shop", Target: "mysql://sluice:secret@replica:3306/shop",
		Tables: []string{"public.orders"}, StateDir: "/var/lib/sluice", SourceMode: "auto", ApplyBatchSize: 1000,
		ApplyMode: "pipelined", MultiStatements: "auto", Controller: "model", MinLanes: 1, MaxLanes: 16, StallRatio: 0.1,
		StallWindow: 2 * time.Minute, MaxBatchBytes: 16 << 20, PollInterval: 200 * time.Millisecond, MaxQueueBytes: 64 << 20,
		ShutdownTimeout: 30 * time.Second, LogLevel: "info", LogFormat: "auto",
		InitialCopy: "auto", CreateTables: "on", SchemaChanges: "follow", CopyWorkers: 4, CopyChunkRows: 50000,
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Stream)
		want []string // every substring must be in the error; nil: valid
	}{
		{"defaults", func(*Stream) {}, nil},
		{"pg key=value source", func(s *Stream) { s.Source = "host=db1 port=5432 dbname=shop user=app password=secret" }, nil},
		{"mysql DSN target", func(s *Stream) { s.Target = "sluice:secret@tcp(replica:3306)/shop" }, nil},
		{"mariadb scheme", func(s *Stream) { s.Target = "mariadb://sluice@replica/shop" }, nil},
		{"max-lanes 0", func(s *Stream) { s.MaxLanes = 0 }, []string{"--max-lanes 0", "at least 1"}},
		{"max-lanes -3", func(s *Stream) { s.MaxLanes = -3 }, []string{"--max-lanes -3", "at least 1"}},
		{"min > max", func(s *Stream) { s.MinLanes, s.MaxLanes = 4, 2 }, []string{"--min-lanes 4", "--max-lanes 2", "at most"}},
		{"stall-ratio 2", func(s *Stream) { s.StallRatio = 2 }, []string{"--stall-ratio 2", "between 0 and 1"}},
		{"stall-ratio 0", func(s *Stream) { s.StallRatio = 0 }, []string{"--stall-ratio 0"}},
		{"source-mode wal", func(s *Stream) { s.SourceMode = "wal" }, []string{`--source-mode "wal"`, "logical", "binlog", "trigger"}},
		{"controller pid", func(s *Stream) { s.Controller = "pid" }, []string{`--controller "pid": want model or aimd`}},
		{"controller typo", func(s *Stream) { s.Controller = "aimdd" }, []string{`did you mean "aimd"?`}},
		{"multi-statements yes", func(s *Stream) { s.MultiStatements = "yes" }, []string{`--multi-statements "yes"`, "auto, on or off"}},
		{"apply-batch-size 0", func(s *Stream) { s.ApplyBatchSize = 0 }, []string{"--apply-batch-size 0", "at least 1"}},
		{"apply-mode", func(s *Stream) { s.ApplyMode = "fast" }, []string{`--apply-mode "fast"`}},
		{"initial-copy yes", func(s *Stream) { s.InitialCopy = "yes" }, []string{`--initial-copy "yes"`, "auto, on or off"}},
		{"initial-copy on with from-now", func(s *Stream) { s.InitialCopy, s.FromNow = "on", true }, []string{"--initial-copy on and --from-now", "--initial-copy=off --from-now"}},
		{"initial-copy off with from-now", func(s *Stream) { s.InitialCopy, s.FromNow = "off", true }, nil},
		{"create-tables maybe", func(s *Stream) { s.CreateTables = "maybe" }, []string{`--create-tables "maybe"`, "on or off"}},
		{"schema-changes ignore", func(s *Stream) { s.SchemaChanges = "ignore" }, []string{`--schema-changes "ignore"`, "follow or stop"}},
		{"copy-workers 0", func(s *Stream) { s.CopyWorkers = 0 }, []string{"--copy-workers 0", "at least 1"}},
		{"copy-chunk-rows -1", func(s *Stream) { s.CopyChunkRows = -1 }, []string{"--copy-chunk-rows -1", "at least 1"}},
		{"redis target", func(s *Stream) { s.Target = "redis://:secret@cache:6379/0" }, []string{"--target", `"redis"`, "not a database sluice supports"}},
		{"http source", func(s *Stream) { s.Source = "http://db1/shop" }, []string{"--source", `"http"`}},
		{"garbage source", func(s *Stream) { s.Source = "db1 shop secret" }, []string{"--source", "not a connection string"}},
		{"bad port", func(s *Stream) { s.Source = "postgres://app:secret@db1:99999/shop" }, []string{"--source", "port"}},
		{"pg unix socket", func(s *Stream) { s.Source = "postgres:///shop?host=/run/postgresql" }, nil},
		{"no host", func(s *Stream) { s.Target = "mysql:///shop" }, []string{"--target", "no host"}},
		{"unencoded password in a URL", func(s *Stream) { s.Target = "postgres://app:pc%Secret&1@db1/shop" }, []string{"--target", "does not parse", "percent-encode"}},
		{"DSN without db", func(s *Stream) { s.Target = "sluice:secret@tcp(replica:3306)" }, []string{"--target", "/database"}},
		{"stream id charset", func(s *Stream) { s.StreamID = "eu orders" }, []string{`--stream-id "eu orders"`, "letters, digits"}},
		{"stream id too long", func(s *Stream) { s.StreamID = strings.Repeat("a", 57) }, []string{"--stream-id", "at most 56"}},
		{"negative kill-budget", func(s *Stream) { s.KillBudget = -time.Second }, []string{"--kill-budget -1s"}},
		{"kill-budget over timeout", func(s *Stream) { s.KillBudget, s.TargetTxTimeout = 30*time.Second, 20*time.Second }, []string{"--kill-budget 30s", "--target-tx-timeout 20s", "5s"}},
		{"zero poll interval", func(s *Stream) { s.PollInterval = 0 }, []string{"--poll-interval 0s", "more than 0"}},
		{"log-level", func(s *Stream) { s.LogLevel = "verbose" }, []string{`--log-level "verbose"`}},
		{"metrics-listen", func(s *Stream) { s.MetricsListen = "9187" }, []string{`--metrics-listen "9187"`, "host:port"}},
		{"max-queue-bytes", func(s *Stream) { s.MaxQueueBytes = 0 }, []string{"--max-queue-bytes 0"}},
		{"all problems at once", func(s *Stream) { s.MaxLanes, s.Controller = 0, "pid" }, []string{"--max-lanes 0", `--controller "pid"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := goodStream()
			tc.edit(&s)
			err := s.Check()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check: nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Check: %q prints a connection string's password", err)
			}
		})
	}
}

func TestValidateStreamSet(t *testing.T) {
	a, b := goodStream(), goodStream()
	a.StreamID, b.StreamID = "eu-orders", "eu_orders"
	err := Validate("f.toml", []Stream{a, b})
	if err == nil || !strings.Contains(err.Error(), "SLUICE_EU_ORDERS_SOURCE_PASSWORD") || !strings.Contains(err.Error(), `"eu-orders" and "eu_orders"`) {
		t.Fatalf("Validate: %v, want the clash of eu-orders and eu_orders on SLUICE_EU_ORDERS_SOURCE_PASSWORD", err)
	}
	b.StreamID = "us-orders"
	if err := Validate("f.toml", []Stream{a, b}); err != nil {
		t.Fatalf("Validate: %v, want nil", err)
	}
}

func TestDurationWithoutUnit(t *testing.T) {
	_, err := Parse("f.toml", "kill_budget = \"5\"\n")
	if err == nil || !strings.Contains(err.Error(), `write "5s"`) {
		t.Fatalf("Parse: %v, want `write \"5s\"`", err)
	}
}

func TestUnknownKeyDidYouMean(t *testing.T) {
	_, err := Parse("f.toml", "max_lane = 4\n")
	if err == nil || !strings.Contains(err.Error(), `did you mean "max_lanes"?`) {
		t.Fatalf("Parse: %v, want a did-you-mean for max_lanes", err)
	}
	_, err = Parse("f.toml", "zzzzzzzzzz = 4\n")
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("Parse: %v, want no did-you-mean for a key near nothing", err)
	}
}

func TestLevenshtein(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"start", "strat", 1}, {"kitten", "sitting", 3}, {"abc", "", 3}, {"status", "status", 0}} {
		if got := levenshtein(tc.a, tc.b); got != tc.d {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
	if got := Closest("strat", []string{"start", "status"}); got != "start" {
		t.Errorf("Closest(strat) = %q, want start", got)
	}
}
