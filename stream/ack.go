package stream

import (
	"context"
	"time"

	"github.com/sluice-cdc/sluice"
)

// The source is told what is durable on the target (Reader.Ack: prune the
// changelog, confirm the slot's flush LSN) off the apply path. Pruning a
// changelog after a 60,000-change batch took up to 190 ms, which an apply
// loop waiting for it would add to every batch. Acks only ever follow a
// commit and the state file, so a late or coalesced one only means the
// source keeps a little more for a little longer.

// ack hands the newest durable position to the acker, replacing one it has
// not sent yet.
func (s *Stream) ack(pos sluice.Position) {
	s.ackMu.Lock()
	s.ackNext = &pos
	s.ackMu.Unlock()
	select {
	case s.ackWake <- struct{}{}:
	default:
	}
}

// runAcker sends acks until stop is closed, then sends the last one
// pending, bounded by a few seconds.
func (s *Stream) runAcker(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-s.ackWake:
			s.sendAck(ctx)
		case <-stop:
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.sendAck(fctx)
			cancel()
			return
		}
	}
}

func (s *Stream) sendAck(ctx context.Context) {
	s.ackMu.Lock()
	p := s.ackNext
	s.ackNext = nil
	s.ackMu.Unlock()
	if p == nil {
		return
	}
	if err := s.cfg.Reader.Ack(ctx, *p); err != nil && ctx.Err() == nil {
		s.log.Warn("source did not take the acknowledgement; it will be repeated with the next batch", "position", p.String(), "err", err)
	}
}
