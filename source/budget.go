package source

import "sync"

// DefaultBufferBytes bounds the bytes of changes a log reader decodes
// ahead of Read. The stream's queue (--max-queue-bytes) holds what Read
// returned; this is the reader's own read-ahead on top of it.
const DefaultBufferBytes = 16 << 20

// Budget bounds the bytes of changes a reader decodes ahead of Read, so
// that its memory does not depend on the size of rows (a few thousand
// 1 MB rows must not take gigabytes). The decoding side takes bytes
// before it hands changes over and waits while the budget is spent; Read
// gives them back. A hand-over is always let through when nothing is held,
// so a change bigger than the whole budget cannot wedge the reader.
type Budget struct {
	max   int64
	mu    sync.Mutex
	used  int64
	freed chan struct{}
}

// NewBudget returns a budget of max bytes (DefaultBufferBytes if max ≤ 0).
func NewBudget(max int64) *Budget {
	if max <= 0 {
		max = DefaultBufferBytes
	}
	return &Budget{max: max, freed: make(chan struct{}, 1)}
}

// TryTake takes n bytes if they fit, or if nothing is held.
func (b *Budget) TryTake(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > 0 && b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// Give returns n bytes and wakes a waiting taker.
func (b *Budget) Give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// Freed receives after bytes were given back: wait on it, then TryTake
// again.
func (b *Budget) Freed() <-chan struct{} { return b.freed }

// Used returns the bytes held.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
