package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/metrics"
	"github.com/sluice-cdc/sluice/stream"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// Status is a stream's state as `sync status` shows it. A running daemon
// rewrites status/<stream>.json in the state dir every second, because the
// state file itself stays locked while it runs.
type Status struct {
	Stream     string  `json:"stream"`
	Running    bool    `json:"running"`
	Position   string  `json:"position"`
	Seq        uint64  `json:"seq"`
	Applied    uint64  `json:"applied"`
	Rate       float64 `json:"rate_per_s"`
	LagSeconds float64 `json:"lag_seconds"`
	BatchSize  int     `json:"batch_size"`
	LastTxMS   float64 `json:"last_tx_ms"`
	RTTMS      float64 `json:"rtt_ms"`
	FixedMS    float64 `json:"fitted_fixed_cost_ms"`
	PerChangeU float64 `json:"fitted_per_change_us"`
	QueueLen   int     `json:"queue_changes"`
	QueueBytes int64   `json:"queue_bytes"`
	Retries    uint64  `json:"retries"`
	Kills      uint64  `json:"kills"`
	SourceRate float64 `json:"source_rate_per_s"`
	Lanes      int     `json:"lanes"`
	Stalled    bool    `json:"stalled"`
	StallWhy   string  `json:"stall_reason,omitempty"`
	LastError  string  `json:"last_error,omitempty"`
	// Memory is the process's memory when the status was written (shared
	// by the streams of one process).
	Memory *metrics.Memory `json:"memory,omitempty"`
	// Copy is the initial copy's progress while the stream copies.
	Copy *CopyStatus `json:"copy,omitempty"`
	// Health is the stream's last health check (health.go).
	Health *HealthStatus `json:"health,omitempty"`
	// RetryAt is when a failed stream is started again (daemons running
	// several streams restart a failed one after a backoff).
	RetryAt    time.Time `json:"retry_at,omitzero"`
	LastCommit time.Time `json:"last_commit,omitzero"`
	Updated    time.Time `json:"updated"`
	PID        int       `json:"pid,omitempty"`
}

// CopyStatus is an initial copy's progress in the status file.
type CopyStatus struct {
	Done       bool              `json:"done"`
	Epoch      int               `json:"epoch"`
	Rows       int64             `json:"rows"`
	Total      int64             `json:"rows_estimate"`
	Bytes      int64             `json:"bytes"`
	Percent    float64           `json:"percent"`
	Rate       float64           `json:"rows_per_s"`
	ETASeconds float64           `json:"eta_seconds"`
	Tables     []CopyTableStatus `json:"tables"`
	Line       string            `json:"summary"`
}

// CopyTableStatus is one table's part of the copy.
type CopyTableStatus struct {
	Table      string  `json:"table"`
	Rows       int64   `json:"rows"`
	Total      int64   `json:"rows_estimate"`
	Bytes      int64   `json:"bytes"`
	Percent    float64 `json:"percent"`
	Chunks     int     `json:"chunks"`
	ChunksDone int     `json:"chunks_done"`
}

func copyStatus(p tablecopy.Progress) *CopyStatus {
	c := &CopyStatus{Done: p.Done, Epoch: p.Epoch, Rows: p.Rows, Total: p.Total, Bytes: p.Bytes, Rate: p.Rate,
		ETASeconds: p.ETA.Seconds(), Line: copyLine(p)}
	if p.Total > 0 {
		c.Percent = min(100, 100*float64(p.Rows)/float64(p.Total))
	}
	if p.Done {
		c.Percent = 100
	}
	for _, t := range p.Tables {
		c.Tables = append(c.Tables, CopyTableStatus{Table: t.Table.String(), Rows: t.Rows, Total: t.Total, Bytes: t.Bytes,
			Percent: t.Percent(), Chunks: t.Chunks, ChunksDone: t.ChunksDone})
	}
	return c
}

// WriteCopyStatus replaces the stream's status file with the initial
// copy's progress.
func WriteCopyStatus(dir, id string, p tablecopy.Progress) error {
	return writeStatusFile(dir, Status{Stream: id, Running: true, Copy: copyStatus(p), Updated: time.Now().UTC(), PID: os.Getpid()})
}

func writeStatusFile(dir string, v Status) error {
	return writeJSONFile(statusPath(dir, v.Stream), v)
}

// writeJSONFile replaces the file at path with v as JSON, atomically,
// creating its directory.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}

func statusPath(dir, stream string) string {
	return filepath.Join(dir, "status", stream+".json")
}

// WriteStatus replaces the stream's status file atomically.
func WriteStatus(dir string, s stream.Stats, running bool) error {
	v := Status{
		Stream: s.Stream, Running: running, Position: s.Position.String(), Seq: s.Seq, Applied: s.Applied, Rate: s.Rate,
		LagSeconds: s.Lag.Seconds(), BatchSize: s.BatchSize, LastTxMS: ms(s.LastTxTime), RTTMS: ms(s.RTT),
		FixedMS: ms(s.FixedCost), PerChangeU: float64(s.PerChange) / float64(time.Microsecond),
		QueueLen: s.QueueLen, QueueBytes: s.QueueBytes, Retries: s.Retries, Kills: s.Kills,
		SourceRate: s.SourceRate, Stalled: s.Stalled, StallWhy: s.StallReason, Lanes: s.Lanes,
		LastError: s.LastError, LastCommit: s.LastCommit, Updated: time.Now().UTC(), PID: os.Getpid(),
	}
	if running {
		m := metrics.ReadMemory()
		v.Memory = &m
	}
	return writeStatusFile(dir, v)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ReadStatus returns every stream's status in dir: the live figures of a
// running daemon from its status files, and the durable checkpoints from
// the state file when no daemon holds it.
func ReadStatus(dir string) ([]Status, error) {
	byStream := map[string]*Status{}
	files, _ := filepath.Glob(filepath.Join(dir, "status", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s Status
		if json.Unmarshal(b, &s) == nil && s.Stream != "" {
			if s.Running && time.Since(s.Updated) > 10*time.Second {
				s.Running = false // the daemon died without a final write (kill -9)
			}
			byStream[s.Stream] = &s
		}
	}
	store, err := checkpoint.ReadOnly(dir)
	switch {
	case err == nil:
		recs, lerr := store.List()
		store.Close()
		if lerr != nil {
			return nil, lerr
		}
		for _, r := range recs {
			s := byStream[r.Stream]
			if s == nil {
				s = &Status{Stream: r.Stream}
				byStream[r.Stream] = s
			}
			s.Running = false
			s.Position, s.Seq, s.Applied, s.LastCommit = r.Position.String(), r.Seq, r.Applied, r.Time
			s.LastError = r.LastError
			s.LagSeconds, s.Rate, s.QueueLen, s.QueueBytes = 0, 0, 0, 0
		}
	case errors.Is(err, checkpoint.ErrInUse):
		// A daemon runs: its status files are current.
	default:
		if len(byStream) == 0 {
			return nil, fmt.Errorf("no sluice state in %s: %w", dir, err)
		}
	}
	out := make([]Status, 0, len(byStream))
	for _, s := range byStream {
		if hs, ok := readHealthFile(dir, s.Stream); ok {
			s.Health = hs
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stream < out[j].Stream })
	return out, nil
}

// recordStatusError marks a stream's status file stopped with err, keeping
// the figures it last showed (or writing a fresh one); retryAt is when it
// is started again, zero if it is not.
func recordStatusError(dir, id, msg string, retryAt time.Time) error {
	s := Status{Stream: id}
	if b, err := os.ReadFile(statusPath(dir, id)); err == nil {
		_ = json.Unmarshal(b, &s)
	}
	s.Stream, s.Running, s.LastError, s.Updated, s.PID = id, false, msg, time.Now().UTC(), os.Getpid()
	s.RetryAt = retryAt.UTC()
	return writeStatusFile(dir, s)
}
