package wanproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

const oneWay = 48 * time.Millisecond

// listen starts a TCP server running handle for each connection.
func listen(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func echo(c net.Conn) { io.Copy(c, c) }

func startProxy(t *testing.T, target string, d time.Duration) *Proxy {
	t.Helper()
	p, err := Start(target, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pingPong(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatalf("write ping: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read pong: %v", err)
	}
}

func TestPingPongTakesOneRoundTrip(t *testing.T) {
	t.Parallel()
	p := startProxy(t, listen(t, echo), oneWay)
	c := dial(t, p.Addr())
	pingPong(t, c) // connection set-up is not part of the measurement
	for range 3 {
		start := time.Now()
		pingPong(t, c)
		if took := time.Since(start); took < 2*oneWay || took >= 150*time.Millisecond {
			t.Errorf("ping-pong took %v, want [%v, 150ms)", took, 2*oneWay)
		}
	}
}

func TestBulkTransferIsDelayedNotThrottled(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	received := make(chan time.Time, 1)
	target := listen(t, func(c net.Conn) {
		if _, err := io.CopyN(io.Discard, c, size); err == nil {
			received <- time.Now()
		}
	})
	// A long delay, so that the transfer itself (slow under -race on a
	// loaded machine) stays well inside it: a proxy that slept per chunk
	// would take tens of delays.
	const delay = 300 * time.Millisecond
	p := startProxy(t, target, delay)
	c := dial(t, p.Addr())
	payload := bytes.Repeat([]byte{'x'}, size)
	start := time.Now()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-received:
		// One delay plus transfer time; a proxy that slept per chunk would
		// take a multiple of the delay.
		if took := at.Sub(start); took <= delay || took >= 2*delay {
			t.Errorf("1 MiB took %v to arrive, want (%v, %v)", took, delay, 2*delay)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("1 MiB never arrived")
	}
}

func TestRoundTripCounting(t *testing.T) {
	t.Parallel()
	p := startProxy(t, listen(t, echo), 0)
	c := dial(t, p.Addr())
	const n = 7
	for range n {
		pingPong(t, c)
	}
	if got := p.RoundTrips(); got != n {
		t.Errorf("after %d ping-pongs RoundTrips() = %d, want %d", n, got, n)
	}
	p.ResetRoundTrips()
	pingPong(t, c)
	if got := p.RoundTrips(); got != 1 {
		t.Errorf("after reset and one ping-pong RoundTrips() = %d, want 1", got)
	}

	// Many writes the server never answers are one round trip.
	const size = 1 << 20
	done := make(chan struct{})
	sinkProxy := startProxy(t, listen(t, func(c net.Conn) {
		io.CopyN(io.Discard, c, size)
		close(done)
	}), 0)
	s := dial(t, sinkProxy.Addr())
	block := make([]byte, 16<<10)
	for sent := 0; sent < size; sent += len(block) {
		if _, err := s.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if got := sinkProxy.RoundTrips(); got != 1 {
		t.Errorf("one-way stream of many chunks: RoundTrips() = %d, want 1", got)
	}
}

// expectClosed waits for c to report the end of the connection.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open (read err %v)", err)
	}
}

func TestDropAndRefuse(t *testing.T) {
	t.Parallel()
	p := startProxy(t, listen(t, echo), time.Millisecond)

	c := dial(t, p.Addr())
	pingPong(t, c)
	p.DropConnections()
	expectClosed(t, c)
	pingPong(t, dial(t, p.Addr())) // new connections still work

	open := dial(t, p.Addr())
	pingPong(t, open)
	p.SetRefuse(true)
	expectClosed(t, open)
	expectClosed(t, dial(t, p.Addr()))

	p.SetRefuse(false)
	pingPong(t, dial(t, p.Addr()))
}

func TestHalfClosePropagates(t *testing.T) {
	t.Parallel()
	p := startProxy(t, listen(t, echo), 5*time.Millisecond)
	c := dial(t, p.Addr())
	msg := []byte("last words")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// The echo server sees EOF only after the data, answers, and closes; we
	// must get all of it followed by EOF.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Errorf("got %q, want %q", got, msg)
	}
}

// readWithin reads len(want) bytes from c, failing unless they arrive
// within d and equal want.
func readWithin(t *testing.T, c net.Conn, want []byte, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// expectSilent checks that nothing arrives on c for d and that c is still
// open: the read times out rather than ending.
func expectSilent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	if n > 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("during the blackhole: read %d bytes, err %v; want nothing and the connection open", n, err)
	}
}

func TestBlackholeHoldsBytesAndKeepsConnectionsOpen(t *testing.T) {
	t.Parallel()
	p := startProxy(t, listen(t, echo), 0)
	c := dial(t, p.Addr())
	pingPong(t, c)

	// Until cleared: the ping is held, not lost, and the connection stays.
	p.Blackhole(0)
	if !p.Blackholed() {
		t.Fatal("Blackholed() false after Blackhole(0)")
	}
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	expectSilent(t, c, 150*time.Millisecond)
	// A connection opened during the blackhole is accepted and held too.
	late := dial(t, p.Addr())
	if _, err := late.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	expectSilent(t, late, 50*time.Millisecond)
	p.ClearBlackhole()
	if p.Blackholed() {
		t.Fatal("Blackholed() true after ClearBlackhole")
	}
	readWithin(t, c, []byte("held"), 2*time.Second)
	readWithin(t, late, []byte("late"), 2*time.Second)

	// For a duration: the bytes arrive once it has passed, by themselves.
	const d = 200 * time.Millisecond
	start := time.Now()
	p.Blackhole(d)
	if _, err := c.Write([]byte("timed")); err != nil {
		t.Fatal(err)
	}
	readWithin(t, c, []byte("timed"), 2*time.Second)
	if took := time.Since(start); took < d {
		t.Errorf("a %v blackhole delivered after %v", d, took)
	}
	pingPong(t, c)
}

func TestResetConnectionsSendsRST(t *testing.T) {
	t.Parallel()
	p := startProxy(t, listen(t, echo), 0)
	c := dial(t, p.Addr())
	pingPong(t, c)
	p.ResetConnections()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	// An orderly close (DropConnections) reads io.EOF; a reset must not.
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetConnections: %v, want ECONNRESET", err)
	}
	pingPong(t, dial(t, p.Addr())) // new connections still work
}

func TestBandwidthLimit(t *testing.T) {
	t.Parallel()
	const size, rate = 48 << 10, 96 << 10 // half a second's budget
	received := make(chan time.Time, 2)
	target := listen(t, func(c net.Conn) {
		if _, err := io.CopyN(io.Discard, c, size); err == nil {
			received <- time.Now()
		}
	})
	p := startProxy(t, target, 0)
	send := func() time.Duration {
		t.Helper()
		c := dial(t, p.Addr())
		start := time.Now()
		if _, err := c.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-received:
			return at.Sub(start)
		case <-time.After(10 * time.Second):
			t.Fatal("data never arrived")
			return 0
		}
	}
	p.SetBandwidth(rate)
	// The last of the ten pieces leaves 0.45 s after the first.
	if took := send(); took < 400*time.Millisecond || took > 2*time.Second {
		t.Errorf("%d bytes at %d bytes/s took %v, want about 0.5 s", size, rate, took)
	}
	p.SetBandwidth(0)
	if took := send(); took > 300*time.Millisecond {
		t.Errorf("%d bytes without a limit took %v", size, took)
	}
}
