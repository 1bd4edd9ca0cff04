package cutover

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/verify"
)

// reached is a source position and the first checkpoint of the stream
// seen to cover it.
type reached struct {
	want sluice.Position
	cp   sluice.Checkpoint
}

// checkpoint reads the stream's checkpoint (its low watermark) on the
// target.
func (c *cutover) checkpoint(ctx context.Context) (sluice.Checkpoint, error) {
	snap, err := c.vtgt.Begin(ctx)
	if err != nil {
		return sluice.Checkpoint{}, err
	}
	defer snap.Close()
	cp, ok, err := snap.Checkpoint(ctx, c.cfg.Stream)
	if err != nil {
		return sluice.Checkpoint{}, fmt.Errorf("%w (is this the target of stream %s, and has the stream committed there?)", err, c.cfg.Stream)
	}
	if !ok {
		return sluice.Checkpoint{}, fmt.Errorf("stream %s has no checkpoint on the target %s: cutover needs the stream that writes the target, started and running (sluice sync start); check the stream id and the target", c.cfg.Stream, c.vtgt.Where())
	}
	return cp, nil
}

// caughtUp reads the source's position now and waits, up to CatchUp,
// until the stream's checkpoint on the target covers it: the target then
// holds every change the source committed before it.
func (c *cutover) caughtUp(ctx context.Context) (reached, error) {
	want, err := c.src.position(ctx, c.kind, c.like)
	if err != nil {
		return reached{}, err
	}
	deadline := time.Now().Add(c.cfg.CatchUp)
	var eta etaEstimate
	var have sluice.Position
	var lastErr error
	for {
		cp, err := c.checkpoint(ctx)
		if err != nil {
			return reached{}, err
		}
		have = cp.Position
		ok, err := verify.Covers(cp.Position, want)
		switch {
		case err == nil && ok:
			return reached{want: want, cp: cp}, nil
		case err != nil:
			// A trigger stream's checkpoint inside an open window cannot
			// be placed until the window closes: it may become
			// comparable.
			lastErr = err
		}
		if time.Now().After(deadline) {
			why := ""
			if lastErr != nil {
				why = fmt.Sprintf(" (the last comparison failed: %v)", lastErr)
			}
			return reached{}, &NotReadyError{fmt.Sprintf("stream %s did not apply up to the source's position %s within %s: its checkpoint on the target is at %s%s; "+
				"is the stream running (sluice sync status) and keeping up? Run cutover again once it is, or give it longer with --catch-up",
				c.cfg.Stream, want, c.cfg.CatchUp, have, why)}
		}
		p := Progress{Step: "catch-up", Want: want, Have: have}
		if d, unit, ok := behind(have, want); ok {
			p.Behind, p.Unit, p.ETA = d, unit, eta.observe(d)
		}
		c.cfg.Progress(p)
		select {
		case <-ctx.Done():
			return reached{}, ctx.Err()
		case <-time.After(c.cfg.Poll):
		}
	}
}

// etaEstimate turns a distance observed over time into a time left.
type etaEstimate struct {
	first    float64
	firstAt  time.Time
	observed bool
}

func (e *etaEstimate) observe(d float64) time.Duration {
	now := time.Now()
	if !e.observed || d > e.first {
		e.first, e.firstAt, e.observed = d, now, true
		return 0
	}
	done := e.first - d
	elapsed := now.Sub(e.firstAt)
	if done <= 0 || elapsed <= 0 {
		return 0
	}
	return time.Duration(d / done * float64(elapsed))
}

// behind is how far checkpoint have is from source position want, where
// the positions say: WAL bytes, binlog bytes within one file, MariaDB
// transactions, changelog ids.
func behind(have, want sluice.Position) (float64, string, bool) {
	if have.Kind != want.Kind {
		return 0, "", false
	}
	switch have.Kind {
	case pglogical.Kind:
		h, err1 := lsnOf(have.Token)
		w, err2 := lsnOf(want.Token)
		if err1 != nil || err2 != nil {
			return 0, "", false
		}
		return float64(max(0, int64(w)-int64(h))), "bytes of WAL", true
	case mytrigger.Kind:
		h, err1 := strconv.ParseUint(have.Token, 10, 64)
		w, err2 := strconv.ParseUint(want.Token, 10, 64)
		if err1 != nil || err2 != nil {
			return 0, "", false
		}
		return float64(max(0, int64(w)-int64(h))), "changelog rows", true
	case binlog.Kind:
		hb, _, _ := strings.Cut(have.Token, "|")
		wb, _, _ := strings.Cut(want.Token, "|")
		hm, hr, _ := strings.Cut(hb, ":")
		wm, wr, _ := strings.Cut(wb, ":")
		if hm != wm {
			return 0, "", false
		}
		switch hm {
		case "file":
			hf, ho, ok1 := cutLast(hr)
			wf, wo, ok2 := cutLast(wr)
			if !ok1 || !ok2 || hf != wf {
				return 0, "", false
			}
			return float64(max(0, wo-ho)), "bytes of binlog", true
		case "mariadb":
			h, ok1 := mariaSeqs(hr)
			w, ok2 := mariaSeqs(wr)
			if !ok1 || !ok2 {
				return 0, "", false
			}
			var n int64
			for d, s := range w {
				n += max(0, s-h[d])
			}
			return float64(n), "transactions", true
		}
	}
	return 0, "", false
}

// lsnOf reads the LSN a pglogical token starts with.
func lsnOf(tok string) (pglogrepl.LSN, error) {
	s, _, _ := strings.Cut(tok, "@")
	if i := strings.LastIndexByte(s, '/'); i > 0 && strings.Count(s, "/") == 2 {
		s = s[:i]
	}
	return pglogrepl.ParseLSN(s)
}

func cutLast(s string) (string, int64, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(s[i+1:], 10, 64)
	return s[:i], n, err == nil
}

// mariaSeqs reads a MariaDB GTID position as each domain's sequence
// number.
func mariaSeqs(s string) (map[uint32]int64, bool) {
	set, err := mysql.ParseMariadbGTIDSet(s)
	if err != nil {
		return nil, false
	}
	out := map[uint32]int64{}
	for d, g := range set.(*mysql.MariadbGTIDSet).Sets {
		out[d] = int64(g.SequenceNumber)
	}
	return out, true
}
