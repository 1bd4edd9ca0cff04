// Package wanproxy is a TCP proxy that puts a wide-area link between a client
// and a server on one machine: each direction is a true delay line (data read
// at t is written at t+d, order kept, bandwidth not throttled unless a limit
// is set). It also counts client round trips and injects link faults, each
// settable while the proxy runs, after toxiproxy's toxics: drop or refuse
// connections, blackhole the link (bytes held, connections left open), reset
// connections (RST), and limit the bandwidth of each direction.
package wanproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// chunkSize is the largest read forwarded as one unit.
	chunkSize = 64 << 10
	// queueChunks bounds the data in flight per direction. At 64 KiB a chunk
	// this is far more than any link the tests model can carry in one delay,
	// so the bound only matters as backpressure on a runaway sender.
	queueChunks = 8192
	dialTimeout = 10 * time.Second
)

// Proxy forwards connections accepted on a local address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	delay      atomic.Int64 // one-way delay in nanoseconds
	roundTrips atomic.Int64
	refuse     atomic.Bool
	bandwidth  atomic.Int64 // bytes/s per direction of each connection; 0: unlimited

	holdMu    sync.Mutex
	held      chan struct{} // non-nil while blackholed; closed when released
	holdTimer *time.Timer

	mu     sync.Mutex
	conns  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every link's goroutines
}

// Start listens on 127.0.0.1:0 and forwards every accepted connection to
// target, delaying data by oneWay in each direction.
func Start(target string, oneWay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("wanproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*link]struct{})}
	p.delay.Store(int64(oneWay))
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay for data read from now on; data already
// queued keeps its due time.
func (p *Proxy) SetDelay(oneWay time.Duration) { p.delay.Store(int64(oneWay)) }

// RoundTrips counts client round trips since Start or ResetRoundTrips, over
// all connections: a chunk from the client counts one when it is the first on
// its connection or follows data from the server on that connection.
func (p *Proxy) RoundTrips() int64 { return p.roundTrips.Load() }

// ResetRoundTrips sets the round-trip count to zero.
func (p *Proxy) ResetRoundTrips() { p.roundTrips.Store(0) }

// DropConnections closes every open connection, both sides, at once,
// discarding data in flight, as a broken link would.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.abort()
	}
}

// SetRefuse makes the target unreachable while on: open connections are
// dropped and new ones are closed as soon as they are accepted.
func (p *Proxy) SetRefuse(on bool) {
	p.refuse.Store(on)
	if on {
		p.DropConnections()
	}
}

// Blackhole holds every byte in both directions of every connection, open
// or opened meanwhile, without closing any: a link that went silent, as a
// network partition does. The bytes are kept, in order, and delivered when
// the blackhole ends, as TCP's retransmissions would once a partition heals
// (toxiproxy's timeout toxic drops them instead). It ends after d, or with
// ClearBlackhole when d is 0; a Blackhole while one is on replaces its end.
func (p *Proxy) Blackhole(d time.Duration) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	if p.holdTimer != nil {
		p.holdTimer.Stop()
		p.holdTimer = nil
	}
	if d > 0 {
		held := p.held
		p.holdTimer = time.AfterFunc(d, func() { p.release(held) })
	}
}

// ClearBlackhole ends a blackhole: held bytes flow again at once.
func (p *Proxy) ClearBlackhole() {
	p.holdMu.Lock()
	held := p.held
	p.holdMu.Unlock()
	if held != nil {
		p.release(held)
	}
}

// Blackholed reports whether a blackhole is on.
func (p *Proxy) Blackholed() bool { return p.heldChan() != nil }

// release ends the blackhole held, unless another has replaced it.
func (p *Proxy) release(held chan struct{}) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	if p.held != held {
		return
	}
	if p.holdTimer != nil {
		p.holdTimer.Stop()
		p.holdTimer = nil
	}
	close(p.held)
	p.held = nil
}

func (p *Proxy) heldChan() chan struct{} {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	return p.held
}

// ResetConnections ends every open connection with a TCP reset (RST) on
// both sides instead of an orderly close, discarding data in flight, as a
// middlebox or a rebooted peer does: the client's next read or write fails
// with "connection reset by peer" rather than seeing EOF.
func (p *Proxy) ResetConnections() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				// A zero linger makes close send RST and drop unsent data.
				_ = tc.SetLinger(0)
			}
		}
		l.abort()
	}
}

// SetBandwidth limits each direction of each connection to bytesPerSec
// (0: unlimited), for data written from now on. The limit adds to the delay:
// a chunk is sent when due and when the direction's budget allows.
func (p *Proxy) SetBandwidth(bytesPerSec int64) { p.bandwidth.Store(max(bytesPerSec, 0)) }

// Close stops accepting, drops every connection and waits for the proxy's
// goroutines to finish.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropConnections()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("wanproxy: close listener: %w", err)
	}
	return nil
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			// Accept fails for good only once the listener is closed.
			return
		}
		if p.refuse.Load() {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client c and runs the two delay lines.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	// The first client chunk on a connection is a round trip of its own.
	l.serverSpoke.Store(true)
	p.mu.Lock()
	if p.closed || p.refuse.Load() {
		p.mu.Unlock()
		l.abort()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()

	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() {
		defer dirs.Done()
		p.pipe(l, client, server, func() {
			if l.serverSpoke.Swap(false) {
				p.roundTrips.Add(1)
			}
		})
	}()
	go func() {
		defer dirs.Done()
		p.pipe(l, server, client, func() { l.serverSpoke.Store(true) })
	}()
	dirs.Wait()
	l.abort()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	serverSpoke    atomic.Bool // server sent data since the client last did
	done           chan struct{}
	once           sync.Once
}

// abort closes both sides and stops both delay lines.
func (l *link) abort() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe is one direction's delay line: a reader stamps each chunk with its due
// time and queues it; a writer delivers each chunk when due. Many chunks are
// in flight at once, so the delay adds latency without limiting bandwidth.
func (p *Proxy) pipe(l *link, src, dst net.Conn, onChunk func()) {
	queue := make(chan chunk, queueChunks)
	readErr := make(chan error, 1)
	go func() {
		defer close(queue)
		buf := make([]byte, chunkSize)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				onChunk()
				c := chunk{due: time.Now().Add(time.Duration(p.delay.Load()))}
				if n < chunkSize/2 {
					// Small chunks get their own buffer so a queue of them does
					// not pin 64 KiB each.
					c.data = append([]byte(nil), buf[:n]...)
				} else {
					c.data, buf = buf[:n], make([]byte, chunkSize)
				}
				select {
				case queue <- c:
				case <-l.done:
					readErr <- net.ErrClosed
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	// sleepUntil waits for t, or returns false when the link ends first.
	sleepUntil := func(t time.Time) bool {
		wait := time.Until(t)
		if wait <= 0 {
			return true
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			return true
		case <-l.done:
			return false
		}
	}
	var next time.Time // when the bandwidth limit lets the next byte go
	for c := range queue {
		if !sleepUntil(c.due) || !p.waitUnheld(l) {
			drain(queue)
			return
		}
		for data := c.data; len(data) > 0; {
			n := len(data)
			if rate := p.bandwidth.Load(); rate > 0 {
				// Pieces of a tenth of a second's budget, so that the
				// bytes trickle out at the rate instead of in bursts, and a
				// limit changed meanwhile applies to the rest of a chunk.
				n = int(min(int64(n), max(rate/10, 1)))
				if !sleepUntil(next) || !p.waitUnheld(l) {
					drain(queue)
					return
				}
				next = time.Now().Add(time.Duration(int64(n) * int64(time.Second) / rate))
			}
			if _, err := dst.Write(data[:n]); err != nil {
				l.abort()
				drain(queue)
				return
			}
			data = data[n:]
		}
	}
	// Everything the source sent has been delivered: pass its end on. A clean
	// EOF becomes a half-close so the other direction can still finish; an
	// error ends the whole connection.
	if err := <-readErr; errors.Is(err, io.EOF) {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	l.abort()
}

// waitUnheld waits while the proxy is blackholed; false when the link ends
// first.
func (p *Proxy) waitUnheld(l *link) bool {
	for held := p.heldChan(); held != nil; held = p.heldChan() {
		select {
		case <-held:
		case <-l.done:
			return false
		}
	}
	return true
}

// drain empties a queue whose reader is about to stop, so it is not left
// blocked on a full channel.
func drain(q <-chan chunk) {
	for range q {
	}
}
