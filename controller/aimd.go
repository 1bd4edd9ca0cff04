package controller

import (
	"sync"
	"time"
)

// AIMD is the naive batch controller the field note describes, kept for
// comparison (--controller aimd): it adds a fixed step after every batch
// that finished inside the budget and halves after one that did not or was
// killed. It has no model of what a batch costs, so on a round-trip-bound
// link it converges to "small enough to commit, too small to keep up" —
// which the stall detector then reports.
type AIMD struct {
	mu     sync.Mutex
	budget time.Duration
	step   int
	min    int
	max    int
	size   int
	rtt    time.Duration
	model  costModel
}

// NewAIMD returns an AIMD controller starting at initial changes per batch.
func NewAIMD(budget time.Duration, initial int) *AIMD {
	if budget <= 0 {
		budget = DefaultBatchConfig().Budget
	}
	if initial <= 0 {
		initial = 1000
	}
	return &AIMD{budget: budget, step: 100, min: 1, max: 200_000, size: initial}
}

func (c *AIMD) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

func (c *AIMD) Observe(n int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.model.add(float64(n), d.Seconds())
	if d > c.budget {
		c.size = max(c.size/2, c.min)
		return
	}
	c.size = min(c.size+c.step, c.max)
}

func (c *AIMD) Failed(n int, _ time.Duration, _ bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size = max(min(c.size, n)/2, c.min)
	return c.size
}

func (c *AIMD) Model() (fixed, perChange time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, s, ok := c.model.fit()
	return seconds(a), seconds(s), ok
}

func (c *AIMD) SetRTT(d time.Duration) {
	c.mu.Lock()
	c.rtt = d
	c.mu.Unlock()
}

func (c *AIMD) Budget() time.Duration { return c.budget }

// RoundTripsPerChange is unknown to AIMD: it does not model the apply path.
func (c *AIMD) RoundTripsPerChange() float64 { return 0 }
