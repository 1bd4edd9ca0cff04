package daemon

import (
	"context"
	"log/slog"
	"sync"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/endpoint"
	"github.com/sluice-cdc/sluice/source"
	"github.com/sluice-cdc/sluice/stream"
)

// Start-up overlap: a stream that resumes spends a few round trips on the
// target (log in, take its fence, read its checkpoints) before it knows
// where to read the source from; over a WAN that is a third of a second or
// more, during which a log reader could have read a good part of the
// backlog. The state file, read locally, names the position the target's
// checkpoint almost always holds (it is written after each commit with the
// same checkpoint), so the source is opened from it while the target
// connects, and read ahead into memory. Once the target's checkpoint is
// known, the reader is kept if it opened at that position, and closed and
// opened again at the target's otherwise (after a crash between a commit
// and its state file write, or a target restored from a backup): the
// target's checkpoint is what the stream resumes from, always.

// earlySource is a source reader opened from the state file's position
// while the target connects.
type earlySource struct {
	from   sluice.Position
	done   chan struct{}
	rd     reader
	err    error
	cancel context.CancelFunc
}

// openEarly starts opening the stream's log reader at the state file's
// position, or returns nil when there is nothing to open early: a new
// stream, a trigger source (whose reads are queries of their own, not a
// stream to get ahead of), or a state file that cannot be read (runStream
// reports that itself).
func openEarly(ctx context.Context, store *checkpoint.Store, o StreamOptions, log *slog.Logger) *earlySource {
	rec, ok, err := store.Get(o.ID)
	if err != nil || !ok || rec.Position.IsZero() {
		return nil
	}
	eng, err := endpoint.EngineOf(o.SourceURL)
	if err != nil {
		return nil
	}
	mode, err := endpoint.ResolveMode(eng, o.SourceMode, rec.Position)
	if err != nil || (mode != ModeLogical && mode != ModeBinlog) {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &earlySource{from: rec.Position, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(e.done)
		rd, err := openSource(ctx, streamSourceOptions(o, log, false), e.from)
		if err != nil {
			e.err = err
			return
		}
		// An eighth of the queue's bytes, as one read of the stream's
		// may hold: what was read ahead moves into the empty queue before
		// anything else is read, so memory stays within --max-queue-bytes.
		e.rd = readAhead(ctx, cancel, rd, queueBytes(o)/8)
	}()
	return e
}

// streamSourceOptions are the options the stream opens its source with.
func streamSourceOptions(o StreamOptions, log *slog.Logger, oldCheckpoint bool) sourceOptions {
	return sourceOptions{
		URL:           o.SourceURL,
		Mode:          o.SourceMode,
		Stream:        o.ID,
		FromNow:       o.FromNow,
		Tables:        o.Tables,
		PollInterval:  o.PollInterval,
		Progress:      o.ProgressInterval,
		Install:       true,
		OldCheckpoint: oldCheckpoint,
		BufferBytes:   ReadAheadBytes(queueBytes(o)),
		Logger:        log,
	}
}

func queueBytes(o StreamOptions) int64 {
	if o.MaxQueueBytes <= 0 {
		return stream.DefaultMaxQueueBytes
	}
	return o.MaxQueueBytes
}

// ReadAheadBytes is what a log reader may decode ahead of the stream for a
// queue of q bytes: a quarter of it, at most source.DefaultBufferBytes. It
// is on top of the queue (see MemoryBound).
func ReadAheadBytes(q int64) int64 {
	return max(min(source.DefaultBufferBytes, q/4), 1<<20)
}

// take waits for the early open and returns its reader and error when it
// opened at from with the options the stream needs (ok), else closes it.
func (e *earlySource) take(log *slog.Logger, from sluice.Position, oldCheckpoint bool) (rd reader, ok bool, err error) {
	if e == nil {
		return nil, false, nil
	}
	<-e.done
	if e.from == from && !oldCheckpoint {
		log.Debug("resuming with the source reader opened early at the state file's position", "from", from.String())
		return e.rd, true, e.err
	}
	log.Debug("the source was opened early at the state file's position, but the stream resumes from another; opening it again",
		"early", e.from.String(), "from", from.String())
	e.discard()
	return nil, false, nil
}

// discard closes the early reader, if it opened.
func (e *earlySource) discard() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
	if e.rd != nil {
		_ = e.rd.Close()
		e.rd = nil
	}
}

// readAheadPage is how many changes one read ahead asks for.
const readAheadPage = 4096

// aheadReader is a reader that reads ahead into memory, up to limit bytes,
// from its open until its first Read (see Start-up overlap). Only log
// readers are read ahead: their Read gives back nothing it took when its
// context ends.
type aheadReader struct {
	reader
	stop  context.CancelFunc
	done  chan struct{}
	once  sync.Once
	pages [][]sluice.Change // read ahead, not yet handed out
	err   error             // the read ahead's error, handed out after pages
}

// readAhead reads rd ahead until its first Read, or until ctx ends; stop
// ends ctx.
func readAhead(ctx context.Context, stop context.CancelFunc, rd reader, limit int64) *aheadReader {
	r := &aheadReader{reader: rd, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var n int64
		for n < limit {
			cs, err := rd.Read(ctx, readAheadPage)
			if err != nil {
				if ctx.Err() == nil {
					r.err = err
				}
				return
			}
			for i := range cs {
				n += int64(cs[i].Size())
			}
			if len(cs) > 0 {
				r.pages = append(r.pages, cs)
			}
		}
	}()
	return r
}

// halt ends the read ahead and waits for it.
func (r *aheadReader) halt() {
	r.once.Do(func() {
		r.stop()
		<-r.done
	})
}

// Read hands out what was read ahead, then reads on. A page is handed out
// as the reader returned it, not copied: a part of one is capped, and the
// rest, which is handed out later, lies past its capacity (see
// source.Reader).
func (r *aheadReader) Read(ctx context.Context, max int) ([]sluice.Change, error) {
	r.halt()
	if len(r.pages) > 0 {
		p := r.pages[0]
		if max > 0 && len(p) > max {
			r.pages[0] = p[max:]
			return p[:max:max], nil
		}
		r.pages[0] = nil
		r.pages = r.pages[1:]
		return p, nil
	}
	if err := r.err; err != nil {
		r.err = nil
		return nil, err
	}
	return r.reader.Read(ctx, max)
}

// Unwrap returns the reader read ahead: the methods it has besides the
// reader interface (ForeignKeys) are not the aheadReader's (see
// foreignKeysOf).
func (r *aheadReader) Unwrap() reader { return r.reader }

// Close ends the read ahead and closes the reader.
func (r *aheadReader) Close() error {
	r.halt()
	return r.reader.Close()
}
