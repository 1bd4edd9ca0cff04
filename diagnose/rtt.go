package diagnose

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-cdc/sluice/endpoint"
)

// RTTOptions configures RTT.
type RTTOptions struct {
	// Target is the target's connection URL or MySQL DSN.
	Target string
	// Count is the number of pings (default 20).
	Count int
	// Interval is the pause between pings (default 200 ms; 0 uses the
	// default, a negative value pings back to back).
	Interval time.Duration
	// OnSample, if set, is called after each ping.
	OnSample func(i int, d time.Duration)
}

// RTTReport is the round-trip distribution to a target.
type RTTReport struct {
	Target string // password masked
	Engine endpoint.Engine
	Server string // e.g. "PostgreSQL 15.8", when known
	// Connect is how long opening the connection took (TCP, TLS,
	// authentication, session setup) and ConnectRoundTrips how many round
	// trips that was.
	Connect           time.Duration
	ConnectRoundTrips int64
	// RoundTripsPerPing is the counted round trips of one ping: 1 unless
	// something between here and the server splits it.
	RoundTripsPerPing float64
	RTT               RTTStats
}

// RTT opens one connection to the target and pings it Count times, each
// ping a single round trip (PostgreSQL: an empty query; MySQL: COM_PING).
// It creates nothing on the target.
func RTT(ctx context.Context, o RTTOptions) (*RTTReport, error) {
	if o.Count <= 0 {
		o.Count = 20
	}
	if o.Interval == 0 {
		o.Interval = 200 * time.Millisecond
	}
	eng, err := endpoint.EngineOf(o.Target)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	r := &RTTReport{Target: endpoint.MaskURL(o.Target), Engine: eng}
	var c counter
	start := time.Now()
	p, err := openPinger(ctx, eng, o.Target, c.dial)
	if err != nil {
		return nil, err
	}
	defer p.close()
	r.Connect, r.ConnectRoundTrips = time.Since(start), c.roundTrips.Load()
	r.Server = p.server(ctx)
	samples := make([]time.Duration, 0, o.Count)
	c.reset()
	for i := range o.Count {
		if i > 0 && o.Interval > 0 {
			select {
			case <-ctx.Done():
				r.RTT = NewRTTStats(samples)
				return r, ctx.Err()
			case <-time.After(o.Interval):
			}
		}
		t0 := time.Now()
		if err := p.ping(ctx); err != nil {
			r.RTT = NewRTTStats(samples)
			return r, fmt.Errorf("ping %d of %d: %w", i+1, o.Count, err)
		}
		d := time.Since(t0)
		samples = append(samples, d)
		if o.OnSample != nil {
			o.OnSample(i, d)
		}
	}
	r.RoundTripsPerPing = float64(c.roundTrips.Load()) / float64(len(samples))
	r.RTT = NewRTTStats(samples)
	return r, nil
}
