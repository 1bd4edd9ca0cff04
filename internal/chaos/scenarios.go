package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/internal/txkiller"
	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

// randDur is a random duration in [lo, hi).
func (pr *pairRun) randDur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(pr.rng.Int64N(int64(hi-lo)))
}

// sleep waits d or until ctx ends: the length of a fault or the gap
// between two, never a wait for replication (that is polled).
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// scenarioKills kills sluice with SIGKILL at random moments and restarts
// it at once. The stream starts on a populated source, with the target
// link's bandwidth limited until the hand-off, so that the first kills
// land in the initial copy; every tenth kill first waits for progress, so
// that the run cannot pass by restarting forever. After each kill the
// acknowledged position is checked against the target.
func (pr *pairRun) scenarioKills(ctx context.Context) (string, []string, error) {
	pr.dst.proxy.SetBandwidth(pr.cfg.CopyBandwidth)
	defer pr.dst.proxy.SetBandwidth(0)
	inCopy, starting, checks := 0, 0, 0
	var violations []string
	var notes []string
	var lastApplied uint64
	copyDone := false
	for i := 0; i < pr.cfg.Kills && ctx.Err() == nil; i++ {
		pr.mu.Lock()
		pid := pr.proc.cmd.Process.Pid
		pr.mu.Unlock()
		if i%10 == 9 {
			// This process copies rows, or applies past the last one's
			// checkpoint.
			ok := poll(ctx, time.Now().Add(60*time.Second), 100*time.Millisecond, func() bool {
				st, ok := pr.status()
				if !ok || st.PID != pid {
					return false
				}
				if st.Copy != nil {
					return st.Copy.Rows > 0
				}
				return st.Running && st.Applied > lastApplied
			})
			if !ok {
				notes = append(notes, fmt.Sprintf("no progress within 60 s before kill %d (last error: %s)", i+1, lastError(pr.logPath)))
			}
		}
		if pr.rng.IntN(3) == 0 {
			// Anywhere from the start: the connects, the preflight, the
			// slot or the copy's snapshot.
			sleep(ctx, pr.randDur(50*time.Millisecond, 1200*time.Millisecond))
		} else {
			// Once it runs (copying or streaming): anywhere in its work.
			poll(ctx, time.Now().Add(30*time.Second), 20*time.Millisecond, func() bool {
				st, ok := pr.status()
				return ok && st.PID == pid
			})
			sleep(ctx, pr.randDur(0, 800*time.Millisecond))
		}
		st, ok := pr.status()
		switch {
		case ok && st.PID == pid && st.Copy != nil && !st.Copy.Done:
			inCopy++
		case !ok || st.PID != pid || !st.Running:
			starting++
		}
		if ok && st.PID == pid {
			if st.Copy == nil {
				lastApplied = max(lastApplied, st.Applied)
			}
			if !copyDone && st.Running && st.Copy == nil {
				copyDone = true
				pr.dst.proxy.SetBandwidth(0) // the copy is over: the stream at full speed
			}
		}
		pr.kill()
		checks++
		v, err := pr.checkAck(ctx)
		if err != nil {
			notes = append(notes, fmt.Sprintf("ack check after kill %d: %v", i+1, err))
		} else if v != "" {
			violations = append(violations, fmt.Sprintf("kill %d: %s", i+1, v))
			pr.logf("VIOLATION after kill %d: %s", i+1, v)
		}
		pr.vlogf("kill %d/%d (in copy %d)", i+1, pr.cfg.Kills, inCopy)
		if err := pr.startSluice(); err != nil {
			return "", notes, err
		}
	}
	faults := fmt.Sprintf("kill -9 ×%d (%d in the initial copy, %d while starting)", pr.cfg.Kills, inCopy, starting)
	if len(violations) > 0 {
		notes = append(notes, fmt.Sprintf("ACK PAST TARGET after %d of %d kills: %s", len(violations), checks, strings.Join(violations, "; ")))
		return faults, notes, fmt.Errorf("acknowledged position past the target after %d kills", len(violations))
	}
	notes = append(notes, fmt.Sprintf("ack ≤ target checked after each of the %d kills", checks))
	return faults, notes, nil
}

// scenarioTargetRestarts crashes the target server (immediate shutdown)
// at random moments under load.
func (pr *pairRun) scenarioTargetRestarts(ctx context.Context) (string, []string, error) {
	var notes []string
	for i := 0; i < pr.cfg.TargetRestarts && ctx.Err() == nil; i++ {
		sleep(ctx, pr.randDur(time.Second, 3*time.Second))
		t0 := time.Now()
		if err := pr.dst.crash(ctx); err != nil {
			return "", notes, err
		}
		pr.vlogf("target crash %d: back in %v", i+1, time.Since(t0))
	}
	return fmt.Sprintf("target crash ×%d (%s)", pr.cfg.TargetRestarts, crashKind(pr.spec.Dst)), notes, nil
}

func crashKind(e daemon.Engine) string {
	if e == daemon.EnginePostgres {
		return "SIGQUIT, immediate shutdown"
	}
	return "SIGKILL"
}

// scenarioSourceRestarts crashes the source server at random moments; the
// writer is held across each crash so that none of its commits is in
// doubt.
func (pr *pairRun) scenarioSourceRestarts(ctx context.Context) (string, []string, error) {
	for i := 0; i < pr.cfg.SourceRestarts && ctx.Err() == nil; i++ {
		sleep(ctx, pr.randDur(time.Second, 3*time.Second))
		pr.wr.hold()
		err := pr.src.crash(ctx)
		pr.wr.release()
		if err != nil {
			return "", nil, err
		}
		pr.vlogf("source crash %d", i+1)
	}
	return fmt.Sprintf("source crash ×%d (%s)", pr.cfg.SourceRestarts, crashKind(pr.spec.Src)), nil, nil
}

// scenarioBlackholes holds the target's link, then the source's, and so
// on: bytes held, connections left open, for -blackhole-for each.
func (pr *pairRun) scenarioBlackholes(ctx context.Context) (string, []string, error) {
	var links []string
	for i := 0; i < pr.cfg.Blackholes && ctx.Err() == nil; i++ {
		sleep(ctx, pr.randDur(time.Second, 2*time.Second))
		e, name := pr.dst, "target"
		if i%2 == 1 {
			e, name = pr.src, "source"
		}
		links = append(links, name)
		e.proxy.Blackhole(0)
		sleep(ctx, pr.cfg.BlackholeFor)
		e.proxy.ClearBlackhole()
		pr.vlogf("blackhole %d (%s link) cleared", i+1, name)
	}
	return fmt.Sprintf("blackhole %v ×%d (%s link)", pr.cfg.BlackholeFor, pr.cfg.Blackholes, strings.Join(links, ", ")), nil, nil
}

// scenarioStorm runs the transaction killer on the target while the
// writer runs faster than the target link carries (a 80 ms RTT, 32 KiB/s
// link), so that the backlog grows, the batches with it, and a batch's
// transaction outlives the killer's limit.
//
// On a MariaDB target sluice runs with --multi-statements off for the
// storm. In its default mode a batch — BEGIN, the fence check, the rows,
// the checkpoint, COMMIT — goes as one multi-statement packet, and MariaDB
// runs a packet only once all of it has arrived: the transaction is open
// for the server's own work on it, never across the slow link, so no
// transaction lives 2 s and the killer has nothing to kill (every earlier
// run killed 0). With multi-statements off (a server or proxy that does
// not take them) a batch's transaction spans its round trips and its
// bytes on the slow link, as a PostgreSQL target's does in any mode.
func (pr *pairRun) scenarioStorm(ctx context.Context) (faults string, notes []string, err error) {
	const stormOneWay, stormBandwidth = 40 * time.Millisecond, 32 << 10
	// Streaming, not copying: the storm is on apply batches.
	pr.waitStreaming(ctx)
	mode := ""
	if pr.dst.mySrv != nil {
		if err := pr.restartWith("--multi-statements", "off"); err != nil {
			return "", nil, err
		}
		mode = ", --multi-statements off"
		defer func() {
			if err := pr.restartWith(); err != nil {
				notes = append(notes, "restart sluice after the storm: "+err.Error())
			}
		}()
	}
	pr.dst.proxy.SetDelay(stormOneWay)
	pr.dst.proxy.SetBandwidth(stormBandwidth)
	pr.wr.pause.Store(int64(10 * time.Millisecond))
	defer func() {
		pr.dst.proxy.SetDelay(pr.cfg.OneWay)
		pr.dst.proxy.SetBandwidth(0)
		pr.wr.pause.Store(int64(pr.cfg.Pause))
	}()
	var k *txkiller.Killer
	if pr.dst.pgSrv != nil {
		k, err = txkiller.StartPostgres(ctx, pr.dst.killerURL(), pr.cfg.KillerAge, 250*time.Millisecond)
	} else {
		k, err = txkiller.StartMariaDB(ctx, pr.dst.killerURL(), pr.cfg.KillerAge, 250*time.Millisecond)
	}
	if err != nil {
		return "", nil, err
	}
	sleep(ctx, pr.cfg.StormFor)
	k.Stop()
	st, _ := pr.status()
	notes = append(notes, fmt.Sprintf("killer killed %d transactions; sluice counted %d kills, batch size %d", k.Killed(), st.Kills, st.BatchSize))
	return fmt.Sprintf("txkiller > %v for %v (%v RTT, %d KiB/s%s)", pr.cfg.KillerAge, pr.cfg.StormFor, 2*stormOneWay, stormBandwidth>>10, mode), notes, nil
}

// scenarioReadOnly makes the target refuse writes for -read-only-for,
// checks with a probe that it really does, then lets it accept them again.
func (pr *pairRun) scenarioReadOnly(ctx context.Context) (string, []string, error) {
	sleep(ctx, pr.randDur(time.Second, 2*time.Second))
	if err := pr.dst.setReadOnly(ctx, true); err != nil {
		return "", nil, err
	}
	var notes []string
	var probeErr error
	if err := pr.dst.probeWrite(ctx); err == nil {
		probeErr = fmt.Errorf("the read-only episode did not refuse a write by the applier's account")
	} else {
		notes = append(notes, "probe write refused: "+firstLine(err.Error()))
	}
	sleep(ctx, pr.cfg.ReadOnlyFor)
	if err := pr.dst.setReadOnly(ctx, false); err != nil {
		return "", notes, err
	}
	how := "default_transaction_read_only + sessions terminated"
	if pr.dst.mySrv != nil {
		how = "SET GLOBAL read_only=1, applier without SUPER"
	}
	return fmt.Sprintf("target read-only %v (%s)", pr.cfg.ReadOnlyFor, how), notes, probeErr
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// scenarioZombie partitions a running sluice from the target in the middle
// of its work: the target link is held while sluice applies, so that a
// batch it sent is in the link, not yet on the server; sluice is killed and
// a new one started that reaches the target by another path (a failover,
// or a supervisor — or the watchdog — restarting it while the old
// connection lingers); after a while the partition heals and the old
// process's held bytes reach the target, as TCP delivers a dead process's
// unsent data. The server still has the old session and runs what
// arrives: if it is a whole batch with its COMMIT, it commits old row
// images and an old checkpoint over what the new process has written
// since, unless something fences it off. Rounds alternate the two paths.
func (pr *pairRun) scenarioZombie(ctx context.Context) (string, []string, error) {
	const heldFor, newRuns = 1500 * time.Millisecond, 5 * time.Second
	rounds := max(pr.cfg.ZombieRounds, 1)
	if pr.altProxy == nil {
		target := pr.dst.proxyTarget()
		p2, err := wanproxy.Start(target, pr.cfg.OneWay)
		if err != nil {
			return "", nil, err
		}
		pr.altProxy = p2
	}
	paths := [2]*wanproxy.Proxy{pr.dst.proxy, pr.altProxy}
	var notes []string
	cur := 0
	for round := 0; round < rounds && ctx.Err() == nil; round++ {
		// Streaming, not copying: the batch held is an apply batch.
		pr.waitStreaming(ctx)
		sleep(ctx, pr.randDur(500*time.Millisecond, 1500*time.Millisecond))
		held := paths[cur]
		held.Blackhole(0)
		sleep(ctx, heldFor) // sluice sends its next batch into the held link
		pr.kill()
		cur = 1 - cur
		pr.dstURL = strings.Replace(pr.dst.sluiceURL, pr.dst.proxy.Addr(), paths[cur].Addr(), 1)
		if err := pr.startSluice(); err != nil {
			held.ClearBlackhole()
			return "", notes, err
		}
		sleep(ctx, newRuns) // the new sluice applies the backlog and newer changes
		before, err := pr.laneSeqs(ctx)
		if err != nil {
			held.ClearBlackhole()
			return "", notes, err
		}
		held.ClearBlackhole()
		// The old session runs what reaches it at once; a lane whose
		// checkpoint went back in seq was written by the dead process's
		// batch.
		sleep(ctx, time.Second)
		after, err := pr.laneSeqs(ctx)
		if err != nil {
			return "", notes, err
		}
		for lane, seq := range before {
			if a, ok := after[lane]; ok && a < seq {
				notes = append(notes, fmt.Sprintf("round %d: the dead process's batch committed after the new process's: lane %d's checkpoint seq went back from %d to %d", round+1, lane, seq, a))
			}
		}
	}
	return fmt.Sprintf("×%d: target link held %v, kill -9, restart by the other path, the held link released %v later", rounds, heldFor, newRuns), notes, nil
}

// laneSeqs reads the seq of each lane's checkpoint row on the target.
func (pr *pairRun) laneSeqs(ctx context.Context) (map[int]uint64, error) {
	out := map[int]uint64{}
	q := "SELECT lane, seq FROM sluice.checkpoint WHERE stream = $1"
	if pr.dst.pg != nil {
		rows, err := pr.dst.pg.Query(ctx, q, streamID)
		if err != nil {
			return nil, fmt.Errorf("read the target's checkpoint rows: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var lane int
			var seq int64
			if err := rows.Scan(&lane, &seq); err != nil {
				return nil, err
			}
			out[lane] = uint64(seq)
		}
		return out, rows.Err()
	}
	rows, err := pr.dst.my.QueryContext(ctx, "SELECT lane, seq FROM sluice_checkpoint WHERE stream = ?", streamID)
	if err != nil {
		return nil, fmt.Errorf("read the target's checkpoint rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var lane int
		var seq uint64
		if err := rows.Scan(&lane, &seq); err != nil {
			return nil, err
		}
		out[lane] = seq
	}
	return out, rows.Err()
}

// waitStreaming waits (up to a minute) until sluice streams: past its
// start and its initial copy.
func (pr *pairRun) waitStreaming(ctx context.Context) {
	poll(ctx, time.Now().Add(60*time.Second), 50*time.Millisecond, func() bool {
		st, ok := pr.status()
		return ok && st.Running && st.Copy == nil
	})
}
