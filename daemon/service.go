package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/sluice-cdc/sluice/metrics"
	"github.com/sluice-cdc/sluice/stream"
)

// service is the process's face to its supervisor and its monitoring,
// across all its streams: the systemd notify protocol (READY, STATUS,
// WATCHDOG, STOPPING; each a no-op without $NOTIFY_SOCKET) and, with
// MetricsListen, one HTTP server with /metrics, /healthz and /readyz for
// every stream.
type service struct {
	log *slog.Logger
	// watchdog is systemd's WatchdogSec ($WATCHDOG_USEC), zero when off.
	watchdog time.Duration
	idleWait time.Duration

	metrics *metrics.Metrics
	srv     *http.Server
	served  chan struct{}

	// streams lists the process's streams in configuration order.
	streams func() []*slot

	readyOnce sync.Once
	// readySent is set once READY=1 went out: systemd starts the
	// watchdog timer when the service is up, and a ping before READY=1
	// would tell it a process still checking its databases is healthy.
	readySent atomic.Bool
	stopOnce  sync.Once
	loopStop  context.CancelFunc
	loopDone  chan struct{}
}

// statusEvery is how often STATUS= is sent to systemd.
const statusEvery = 5 * time.Second

// startService reads the watchdog setting and, with metricsListen, starts
// serving HTTP: /healthz answers from here on, /readyz once every stream
// applies. STOPPING=1 is sent as soon as ctx ends. killBudget is the
// longest any stream's batch may take, for the watchdog's warning.
func startService(ctx context.Context, log *slog.Logger, metricsListen string, killBudget time.Duration, streams func() []*slot) (*service, error) {
	s := &service{log: log, idleWait: 5 * time.Second, streams: streams}
	wd, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog setting ignored", "err", err)
	}
	if wd > 0 {
		s.watchdog = wd
		// An idle apply loop must go round well inside the ping threshold.
		s.idleWait = min(s.idleWait, wd/4)
		if killBudget > wd {
			log.Warn("WatchdogSec is shorter than --kill-budget: a batch that takes its whole budget stops the watchdog pings; make WatchdogSec at least the budget",
				"watchdog", wd.String(), "kill_budget", killBudget.String())
		}
	}
	if metricsListen != "" {
		s.metrics = metrics.New()
		ln, err := net.Listen("tcp", metricsListen)
		if err != nil {
			return nil, fmt.Errorf("--metrics-listen %s: %w", metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metrics.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "ok")
		})
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
			ok, why := s.ready()
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			fmt.Fprint(w, why)
		})
		s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.served = make(chan struct{})
		go func() {
			defer close(s.served)
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
		log.Info("serving metrics", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.loopStop, s.loopDone = cancel, make(chan struct{})
	go func() {
		defer close(s.loopDone)
		s.loop(loopCtx)
	}()
	context.AfterFunc(ctx, s.stopping)
	return s, nil
}

// addStream registers a stream's metrics, or registers it again with its
// current kill budget when it restarts: its live figures are read from the
// slot at every scrape. Nil without metrics.
func (s *service) addStream(sl *slot) *metrics.Stream {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.AddStream(sl.o.ID, sl.killBudget(), func() (stream.Stats, bool) {
		st, running := sl.running()
		if !running {
			return stream.Stats{}, false
		}
		return st.Stats(), true
	})
}

// addCopy exports a stream's initial copy progress while it runs; the
// returned func stops it.
func (s *service) addCopy(sl *slot) func() {
	if s.metrics == nil {
		return func() {}
	}
	s.metrics.AddCopy(sl.o.ID, sl.copyProgress)
	return func() { s.metrics.RemoveCopy(sl.o.ID) }
}

// removeStream drops a stream's metrics (the stream left the
// configuration).
func (s *service) removeStream(id string) {
	if s.metrics != nil {
		s.metrics.RemoveStream(id)
	}
}

// settled is called when a stream started applying or failed: READY=1 is
// sent once every stream has done one or the other, so a stream whose
// target is down does not hold the others' service in "activating", and
// the STATUS= line names the failed ones.
func (s *service) settled() {
	all := s.streams()
	for _, sl := range all {
		if !sl.settled() {
			return
		}
	}
	s.readyOnce.Do(func() {
		notify(s.log, "READY=1\nSTATUS="+s.statusLine(all))
		s.readySent.Store(true)
	})
}

func (s *service) loop(ctx context.Context) {
	every := statusEvery
	if s.watchdog > 0 {
		every = max(s.watchdog/6, 10*time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastStatus := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		all := s.streams()
		var msg []string
		if s.watchdog > 0 && s.readySent.Load() {
			// Ping only while every applying stream's apply loops went
			// round recently: a loop wedged in a target call stops the
			// pings, and systemd restarts the process WatchdogSec later.
			// An idle loop goes round every idleWait (< watchdog/2); a
			// batch may legitimately hold its loop for up to the kill
			// budget, which the pings tolerate while it stays under
			// watchdog/2 + WatchdogSec. A stream that failed and waits to
			// be restarted is not wedged: its supervisor goes round.
			wedged := ""
			for _, sl := range all {
				st, running := sl.running()
				if !running {
					continue
				}
				if hb := st.Heartbeat(); !hb.IsZero() && time.Since(hb) >= s.watchdog/2 {
					wedged = fmt.Sprintf("stream %s: an apply loop has not gone round for %s", sl.o.ID, time.Since(hb).Round(time.Millisecond))
					break
				}
			}
			if wedged == "" {
				msg = append(msg, "WATCHDOG=1")
			} else {
				s.log.Debug("watchdog ping withheld", "why", wedged)
			}
		}
		if time.Since(lastStatus) >= statusEvery {
			lastStatus = time.Now()
			msg = append(msg, "STATUS="+s.statusLine(all))
		}
		if len(msg) > 0 {
			notify(s.log, strings.Join(msg, "\n"))
		}
	}
}

// stopping sends STOPPING=1, once.
func (s *service) stopping() {
	s.stopOnce.Do(func() { notify(s.log, "STOPPING=1") })
}

// close ends the pings and stops the HTTP server.
func (s *service) close() {
	s.stopping()
	s.loopStop()
	<-s.loopDone
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
		<-s.served
	}
}

// ready says whether every stream applies, with one line per stream.
func (s *service) ready() (bool, string) {
	all := s.streams()
	if len(all) == 0 {
		return false, "no streams\n"
	}
	ok := true
	var b strings.Builder
	for _, sl := range all {
		r, why := sl.ready(s.idleWait)
		ok = ok && r
		if len(all) == 1 {
			return r, why + "\n"
		}
		fmt.Fprintf(&b, "%s: %s\n", sl.o.ID, why)
	}
	return ok, b.String()
}

// statusLine is the one-line summary systemd shows (STATUS=): the stream's
// figures with one stream; with several, how many apply and what is wrong
// with the others.
func (s *service) statusLine(all []*slot) string {
	if len(all) == 1 {
		return all[0].statusLine()
	}
	var good int
	var bad []string
	for _, sl := range all {
		if r, _ := sl.ready(s.idleWait); r {
			good++
			continue
		}
		bad = append(bad, sl.o.ID+" "+sl.statusLine())
	}
	line := fmt.Sprintf("%d of %d streams applying", good, len(all))
	if len(bad) > 0 {
		line += "; " + strings.Join(bad, "; ")
	}
	return oneLine(line)
}

// readyLine says whether one running stream applies: its apply loops go
// round, it is not stalled, and neither the last target transaction nor
// the last ping of the target failed since the last commit.
func readyLine(st *stream.Stream, killBudget, idleWait time.Duration) (bool, string) {
	stats := st.Stats()
	if hb := st.Heartbeat(); !hb.IsZero() {
		if age := time.Since(hb); age > 2*killBudget+idleWait {
			return false, fmt.Sprintf("wedged: an apply loop has not gone round for %s (kill budget %s)", age.Round(time.Second), killBudget)
		}
	}
	switch {
	case stats.Stalled:
		return false, "stalled: " + oneLine(stats.StallReason)
	case stats.LastError != "":
		return false, "retrying: the last target transaction failed: " + oneLine(stats.LastError)
	case stats.PingError != "":
		return false, "target not answering: " + oneLine(stats.PingError)
	}
	return true, "ready: " + statsLine(stats)
}

// statsLine is a running stream's one-line summary.
func statsLine(s stream.Stats) string {
	state := "applying"
	switch {
	case s.Stalled:
		return "STALLED: " + oneLine(s.StallReason)
	case s.LastError != "":
		state = "retrying (" + oneLine(s.LastError) + ")"
	case s.PingError != "":
		state = "target not answering (" + oneLine(s.PingError) + ")"
	case s.CaughtUp:
		state = "caught up"
	}
	return fmt.Sprintf("%s; applied %d, %.0f changes/s, lag %s, batch %d, lanes %d, rtt %s",
		state, s.Applied, s.Rate, s.Lag.Round(10*time.Millisecond), s.BatchSize, s.Lanes, s.RTT.Round(100*time.Microsecond))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// notify sends a message over the systemd notify socket; without
// $NOTIFY_SOCKET it does nothing.
func notify(log *slog.Logger, state string) {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		log.Warn("systemd notify", "err", err)
	}
}
