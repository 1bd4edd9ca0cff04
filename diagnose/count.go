package diagnose

import (
	"context"
	"net"
	"sync/atomic"
	"time"
)

// counter counts the round trips and bytes of every connection it dialed.
// A round trip is a client write that follows a server read on the same
// connection; a connection's first write counts as one. This is the count
// internal/wanproxy makes, taken on the client's side of the socket.
type counter struct {
	roundTrips atomic.Int64
	written    atomic.Int64
	read       atomic.Int64
}

// dial opens a TCP (or unix) connection that counts.
func (c *counter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 15 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: conn, c: c}
	cc.serverSpoke.Store(true)
	return cc, nil
}

func (c *counter) reset() {
	c.roundTrips.Store(0)
	c.written.Store(0)
	c.read.Store(0)
}

type countingConn struct {
	net.Conn
	c *counter
	// serverSpoke: the server sent data since the client last wrote.
	serverSpoke atomic.Bool
}

func (cc *countingConn) Write(p []byte) (int, error) {
	if len(p) > 0 && cc.serverSpoke.Swap(false) {
		cc.c.roundTrips.Add(1)
	}
	n, err := cc.Conn.Write(p)
	cc.c.written.Add(int64(n))
	return n, err
}

func (cc *countingConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 {
		cc.serverSpoke.Store(true)
		cc.c.read.Add(int64(n))
	}
	return n, err
}
