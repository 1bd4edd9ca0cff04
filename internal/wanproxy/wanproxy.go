// Package wanproxy is a TCP proxy that puts a wide-area link between a client
// and a server on one machine: each direction is a true delay line (data read
// at t is written at t+d, order kept, bandwidth not throttled). It also counts
// client round trips and can drop or refuse connections to test faults.
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
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				drain(queue)
				return
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			l.abort()
			drain(queue)
			return
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

// drain empties a queue whose reader is about to stop, so it is not left
// blocked on a full channel.
func drain(q <-chan chunk) {
	for range q {
	}
}
