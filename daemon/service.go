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
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/metrics"
	"github.com/sluice-cdc/sluice/stream"
)

// service is a stream's face to its supervisor and its monitoring: the
// systemd notify protocol (READY, STATUS, WATCHDOG, STOPPING; each a no-op
// without $NOTIFY_SOCKET) and, with MetricsListen, an HTTP server with
// /metrics, /healthz and /readyz.
type service struct {
	log        *slog.Logger
	id         string
	killBudget time.Duration
	// watchdog is systemd's WatchdogSec ($WATCHDOG_USEC), zero when off.
	watchdog time.Duration
	idleWait time.Duration

	st   atomic.Pointer[stream.Stream]
	done atomic.Bool

	metrics *metrics.Metrics
	mstream *metrics.Stream
	srv     *http.Server
	served  chan struct{}

	stopOnce sync.Once
	loopStop context.CancelFunc
	loopDone chan struct{}
}

// statusEvery is how often STATUS= is sent to systemd.
const statusEvery = 5 * time.Second

// startService reads the watchdog setting and, with o.MetricsListen,
// starts serving HTTP: /healthz answers from here on, /readyz once the
// stream applies. STOPPING=1 is sent as soon as ctx ends.
func startService(ctx context.Context, o StreamOptions, log *slog.Logger) (*service, error) {
	s := &service{log: log, id: o.ID, killBudget: o.KillBudget, idleWait: 5 * time.Second}
	wd, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog setting ignored", "err", err)
	}
	if wd > 0 {
		s.watchdog = wd
		// An idle apply loop must go round well inside the ping threshold.
		s.idleWait = min(s.idleWait, wd/4)
		if o.KillBudget > wd {
			log.Warn("WatchdogSec is shorter than --kill-budget: a batch that takes its whole budget stops the watchdog pings; make WatchdogSec at least the budget",
				"watchdog", wd.String(), "kill_budget", o.KillBudget.String())
		}
	}
	if o.MetricsListen != "" {
		s.metrics = metrics.New()
		s.mstream = s.metrics.AddStream(o.ID, o.KillBudget, func() (stream.Stats, bool) {
			st := s.st.Load()
			if st == nil || s.done.Load() {
				return stream.Stats{}, false
			}
			return st.Stats(), true
		})
		ln, err := net.Listen("tcp", o.MetricsListen)
		if err != nil {
			return nil, fmt.Errorf("--metrics-listen %s: %w", o.MetricsListen, err)
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
			fmt.Fprintln(w, why)
		})
		s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.served = make(chan struct{})
		go func() {
			defer close(s.served)
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
		log.Info("serving metrics", "stream", o.ID, "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	}
	context.AfterFunc(ctx, s.stopping)
	return s, nil
}

// onBatch is the stream's OnBatch hook, nil without metrics.
func (s *service) onBatch() func(cs []sluice.Change, d time.Duration, err error) {
	if s.mstream == nil {
		return nil
	}
	return s.mstream.ObserveBatch
}

// started is called once the stream passed its checks and applies: READY=1
// with a first STATUS=, then STATUS= every few seconds and, under a
// watchdog, WATCHDOG=1 while the apply loops go round.
func (s *service) started(st *stream.Stream) {
	s.st.Store(st)
	notify(s.log, "READY=1\nSTATUS="+statusLine(st.Stats()))
	ctx, cancel := context.WithCancel(context.Background())
	s.loopStop, s.loopDone = cancel, make(chan struct{})
	go func() {
		defer close(s.loopDone)
		s.loop(ctx, st)
	}()
}

func (s *service) loop(ctx context.Context, st *stream.Stream) {
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
		var msg []string
		if s.watchdog > 0 {
			// Ping only while every apply loop went round recently: a loop
			// wedged in a target call stops the pings, and systemd restarts
			// the process WatchdogSec later. An idle loop goes round every
			// idleWait (< watchdog/2); a batch may legitimately hold its
			// loop for up to the kill budget, which the pings tolerate while
			// it stays under watchdog/2 + WatchdogSec.
			if hb := st.Heartbeat(); !hb.IsZero() && time.Since(hb) < s.watchdog/2 {
				msg = append(msg, "WATCHDOG=1")
			} else if !hb.IsZero() {
				s.log.Debug("watchdog ping withheld: an apply loop has not gone round", "stream", s.id, "since", time.Since(hb).String())
			}
		}
		if time.Since(lastStatus) >= statusEvery {
			lastStatus = time.Now()
			msg = append(msg, "STATUS="+statusLine(st.Stats()))
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

// stopped is called when the stream has returned: the pings end and
// /readyz fails.
func (s *service) stopped() {
	s.done.Store(true)
	s.stopping()
	if s.loopStop != nil {
		s.loopStop()
		<-s.loopDone
	}
}

// close stops the HTTP server.
func (s *service) close() {
	s.done.Store(true)
	if s.loopStop != nil {
		s.loopStop()
		<-s.loopDone
	}
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
		<-s.served
	}
}

// ready says whether the stream applies: it passed its checks, its apply
// loops go round, it is not stalled, and neither the last target
// transaction nor the last ping of the target failed since the last commit.
func (s *service) ready() (bool, string) {
	st := s.st.Load()
	switch {
	case s.done.Load():
		return false, "stopped"
	case st == nil:
		return false, "starting: the stream has not passed its startup checks yet"
	}
	stats := st.Stats()
	if hb := st.Heartbeat(); !hb.IsZero() {
		if age := time.Since(hb); age > 2*s.killBudget+s.idleWait {
			return false, fmt.Sprintf("wedged: an apply loop has not gone round for %s (kill budget %s)", age.Round(time.Second), s.killBudget)
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
	return true, "ready: " + statusLine(stats)
}

// statusLine is the one-line summary systemd shows (STATUS=).
func statusLine(s stream.Stats) string {
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
