package main

// The verify section (issue 12): `sluice verify` of the built binary on
// equal tables of -verify-rows rows, source and target each behind the
// 96 ms proxy (verify runs far from both), with the bytes that crossed
// the link counted; a row-by-row baseline (SELECT … ORDER BY id on both
// sides, compared in Go) over the same links; and the accuracy cases: one
// changed column, one missing and one extra row, each to be found and
// named.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/internal/wanproxy"
)

const secVerify = "verify"

type verifyConfig struct {
	rows  int
	pairs []string
	rtt   time.Duration
}

func verifyFlags(vc *verifyConfig) func() error {
	var pairs string
	flag.IntVar(&vc.rows, "verify-rows", 2000000, "verify section: rows of the compared table (e.g. 200000 for a quick run)")
	flag.StringVar(&pairs, "verify-pairs", "pg-pg,my-my", "verify section: comma-separated pairs: pg-pg, my-my")
	flag.DurationVar(&vc.rtt, "verify-rtt", 96*time.Millisecond, "verify section: round-trip time between verify and each database")
	return func() error {
		if vc.rows < 10 || vc.rtt < 0 {
			return errors.New("verify section: -verify-rows must be at least 10, -verify-rtt not negative")
		}
		for _, p := range strings.Split(pairs, ",") {
			if p != pairPGPG && p != pairMyMy {
				return fmt.Errorf("-verify-pairs: %q: want pg-pg or my-my", p)
			}
			vc.pairs = append(vc.pairs, p)
		}
		return nil
	}
}

type verifyResult struct {
	pair, run string
	rows      int
	took      time.Duration
	bytes     int64 // both directions, both links
	found     string
	ok        bool
}

// counter is a TCP forwarder that counts the bytes it carries, put in
// front of a delay proxy.
type counter struct {
	ln     net.Listener
	target string
	n      atomic.Int64
}

func startCounter(target string) (*counter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &counter{ln: ln, target: target}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go c.serve(client)
		}
	}()
	return c, nil
}

func (c *counter) serve(client net.Conn) {
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		client.Close()
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(countingWriter{dst, &c.n}, src)
		dst.Close()
		src.Close()
	}
	wg.Add(2)
	go pipe(server, client)
	go pipe(client, server)
	wg.Wait()
}

// countingWriter adds what it writes to n as it goes.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// verifyLink is a counted, delayed way to a database.
type verifyLink struct {
	proxy *wanproxy.Proxy
	count *counter
}

func newVerifyLink(addr string, rtt time.Duration) (*verifyLink, error) {
	p, err := wanproxy.Start(addr, rtt/2)
	if err != nil {
		return nil, err
	}
	c, err := startCounter(p.Addr())
	if err != nil {
		p.Close()
		return nil, err
	}
	return &verifyLink{proxy: p, count: c}, nil
}

func (l *verifyLink) close() { l.count.ln.Close(); l.proxy.Close() }

func (l *verifyLink) url(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = l.count.ln.Addr().String()
	return u.String()
}

func (e *env) benchVerify(ctx context.Context) ([]verifyResult, error) {
	vc := e.cfg.verify
	bin, err := filepath.Abs(e.cfg.copy.sluice)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("-sluice %s: %w (run `make build` first)", e.cfg.copy.sluice, err)
	}
	var out []verifyResult
	for _, pair := range vc.pairs {
		rs, err := e.verifyPair(ctx, bin, pair)
		out = append(out, rs...)
		if err != nil {
			return out, fmt.Errorf("%s: %w", pair, err)
		}
	}
	return out, nil
}

func (e *env) verifyPair(ctx context.Context, bin, pair string) ([]verifyResult, error) {
	vc := e.cfg.verify
	pg := pair == pairPGPG
	var srcURL, dstURL, srcAddr, dstAddr string
	name := e.nextName()
	fmt.Fprintf(os.Stderr, "==> verify %s: filling source and target (%d rows each)\n", pair, vc.rows)
	t0 := time.Now()
	if pg {
		if err := e.postgres(ctx); err != nil {
			return nil, err
		}
		for _, p := range []struct {
			u    *string
			addr *string
			ok   bool
		}{{&srcURL, &srcAddr, true}, {&dstURL, &dstAddr, false}} {
			srv := e.pgSrc
			if !p.ok {
				srv = e.pgDst
			}
			if err := srv.CreateDatabase(ctx, name); err != nil {
				return nil, err
			}
			*p.u, *p.addr = srv.URL(name), srv.Addr()
			if err := execAll(ctx, *p.u,
				"CREATE TABLE vb (id bigint PRIMARY KEY, k int NOT NULL, c text, pad text)",
				fmt.Sprintf("INSERT INTO vb SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), 'pad-' || g FROM generate_series(1, %d) g", vc.rows),
				"VACUUM ANALYZE vb"); err != nil {
				return nil, err
			}
		}
	} else {
		if err := e.mariadb(ctx); err != nil {
			return nil, err
		}
		for i, srv := range []interface {
			CreateDatabase(context.Context, string) error
			URL(string) string
			Addr() string
		}{e.mySrc, e.myDst} {
			if err := srv.CreateDatabase(ctx, name); err != nil {
				return nil, err
			}
			u := srv.URL(name)
			if i == 0 {
				srcURL, srcAddr = u, srv.Addr()
			} else {
				dstURL, dstAddr = u, srv.Addr()
			}
			stmts := []string{"CREATE TABLE vb (id bigint PRIMARY KEY, k int NOT NULL, c text, pad text)"}
			for lo := 1; lo <= vc.rows; lo += 250000 {
				hi := min(lo+249999, vc.rows)
				stmts = append(stmts, fmt.Sprintf("INSERT INTO vb SELECT seq, seq %% 1000, CONCAT(MD5(seq), MD5(seq+1)), CONCAT('pad-', seq) FROM seq_%d_to_%d", lo, hi))
			}
			if err := myExecAll(ctx, u, append(stmts, "ANALYZE TABLE vb")...); err != nil {
				return nil, err
			}
		}
	}
	fmt.Fprintf(os.Stderr, "    filled in %.1f s\n", time.Since(t0).Seconds())
	sl, err := newVerifyLink(srcAddr, vc.rtt)
	if err != nil {
		return nil, err
	}
	defer sl.close()
	dl, err := newVerifyLink(dstAddr, vc.rtt)
	if err != nil {
		return nil, err
	}
	defer dl.close()
	table := "vb"
	if pg {
		table = "public.vb"
	}
	bytesNow := func() int64 { return sl.count.n.Load() + dl.count.n.Load() }

	var out []verifyResult
	verifyRun := func(run string, want []string) error {
		b0 := bytesNow()
		start := time.Now()
		cmd := exec.CommandContext(ctx, bin, "verify", "--source", sl.url(srcURL), "--target", dl.url(dstURL), "--tables", table, "--json")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		took := time.Since(start)
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			return err
		}
		var rep struct {
			Equal  bool `json:"equal"`
			Tables []struct {
				Diffs []struct {
					Key     string   `json:"key"`
					Kind    string   `json:"kind"`
					Columns []string `json:"columns"`
				} `json:"diffs"`
			} `json:"tables"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			return fmt.Errorf("sluice verify exited %d: %s", code, lastLines(stderr.String(), 5))
		}
		var got []string
		for _, t := range rep.Tables {
			for _, d := range t.Diffs {
				got = append(got, strings.TrimSpace(d.Key+" "+d.Kind+" "+strings.Join(d.Columns, ",")))
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		wantCode := 0
		if len(want) > 0 {
			wantCode = 1
		}
		found := strings.Join(got, "; ")
		if found == "" {
			found = "equal"
		}
		out = append(out, verifyResult{pair: pair, run: run, rows: vc.rows, took: took, bytes: bytesNow() - b0,
			found: found, ok: slices.Equal(got, want) && code == wantCode})
		return nil
	}
	if err := verifyRun("sluice verify, equal tables", nil); err != nil {
		return out, err
	}
	b0 := bytesNow()
	start := time.Now()
	n, diffs, err := rowByRow(ctx, pg, sl.url(srcURL), dl.url(dstURL))
	if err != nil {
		return out, fmt.Errorf("row-by-row baseline: %w", err)
	}
	out = append(out, verifyResult{pair: pair, run: "row by row (SELECT … ORDER BY id, compared in Go)", rows: n, took: time.Since(start),
		bytes: bytesNow() - b0, found: fmt.Sprintf("%d differences", diffs), ok: diffs == 0 && n == vc.rows})

	mid, third := vc.rows/2+7, vc.rows/3
	exec1 := func(s string) error {
		if pg {
			return execAll(ctx, dstURL, s)
		}
		return myExecAll(ctx, dstURL, s)
	}
	for _, c := range []struct {
		run, sql, want string
	}{
		{"one changed column", fmt.Sprintf("UPDATE vb SET c = 'changed' WHERE id = %d", mid), fmt.Sprintf("(id=%d) different c", mid)},
		{"one missing row", fmt.Sprintf("DELETE FROM vb WHERE id = %d", third), fmt.Sprintf("(id=%d) missing", third)},
		{"one extra row", fmt.Sprintf("INSERT INTO vb VALUES (%d, 1, 'x', 'y')", vc.rows+100), fmt.Sprintf("(id=%d) extra", vc.rows+100)},
	} {
		if err := exec1(c.sql); err != nil {
			return out, err
		}
		if err := verifyRun(c.run, []string{c.want}); err != nil {
			return out, err
		}
		// Undo, so that each case is alone.
		switch c.run {
		case "one changed column":
			if pg {
				err = exec1(fmt.Sprintf("UPDATE vb SET c = md5('%d') || md5('%d') WHERE id = %d", mid, mid+1, mid))
			} else {
				err = exec1(fmt.Sprintf("UPDATE vb SET c = CONCAT(MD5(%d), MD5(%d)) WHERE id = %d", mid, mid+1, mid))
			}
		case "one missing row":
			if pg {
				err = exec1(fmt.Sprintf("INSERT INTO vb VALUES (%d, %d, md5('%d') || md5('%d'), 'pad-%d')", third, third%1000, third, third+1, third))
			} else {
				err = exec1(fmt.Sprintf("INSERT INTO vb VALUES (%d, %d, CONCAT(MD5(%d), MD5(%d)), 'pad-%d')", third, third%1000, third, third+1, third))
			}
		case "one extra row":
			err = exec1(fmt.Sprintf("DELETE FROM vb WHERE id = %d", vc.rows+100))
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// rowByRow reads both tables in key order over the links and compares
// them in Go: the baseline that sends every row.
func rowByRow(ctx context.Context, pg bool, srcURL, dstURL string) (int, int, error) {
	type rowsIter interface {
		next() ([]string, bool, error)
		close()
	}
	open := func(u string) (rowsIter, error) {
		const q = "SELECT id, k, c, pad FROM vb ORDER BY id"
		if pg {
			conn, err := connect(ctx, u)
			if err != nil {
				return nil, err
			}
			rows, err := conn.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				conn.Close(ctx)
				return nil, err
			}
			return &pgIter{conn: conn, rows: rows}, nil
		}
		db, err := myConnect(ctx, u)
		if err != nil {
			return nil, err
		}
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &myIter{db: db, rows: rows}, nil
	}
	a, err := open(srcURL)
	if err != nil {
		return 0, 0, err
	}
	defer a.close()
	b, err := open(dstURL)
	if err != nil {
		return 0, 0, err
	}
	defer b.close()
	n, diffs := 0, 0
	for {
		ra, oka, err := a.next()
		if err != nil {
			return n, diffs, err
		}
		rb, okb, err := b.next()
		if err != nil {
			return n, diffs, err
		}
		if !oka && !okb {
			return n, diffs, nil
		}
		if oka {
			n++
		}
		if oka != okb || !slices.Equal(ra, rb) {
			diffs++
		}
	}
}

type pgIter struct {
	conn *pgx.Conn
	rows pgx.Rows
}

func (p *pgIter) next() ([]string, bool, error) {
	if !p.rows.Next() {
		return nil, false, p.rows.Err()
	}
	raw := p.rows.RawValues()
	out := make([]string, len(raw))
	for i, v := range raw {
		out[i] = string(v)
	}
	return out, true, nil
}

func (p *pgIter) close() { p.rows.Close(); p.conn.Close(context.Background()) }

type myIter struct {
	db   *sql.DB
	rows *sql.Rows
}

func (m *myIter) next() ([]string, bool, error) {
	if !m.rows.Next() {
		return nil, false, m.rows.Err()
	}
	var v [4]sql.RawBytes
	if err := m.rows.Scan(&v[0], &v[1], &v[2], &v[3]); err != nil {
		return nil, false, err
	}
	out := make([]string, 4)
	for i := range v {
		out[i] = string(v[i])
	}
	return out, true, nil
}

func (m *myIter) close() { m.rows.Close(); m.db.Close() }

func renderVerify(vc verifyConfig, rs []verifyResult, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## verify (issue 12): %d rows, source and target each behind a %s proxy\n\n", vc.rows, vc.rtt)
	b.WriteString("| pair | run | rows | time | rows/s | bytes over the links | found | ok |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		ok := "yes"
		if !r.ok {
			ok = "**NO**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f s | %.0f | %s | %s | %s |\n", r.pair, r.run, r.rows, r.took.Seconds(),
			float64(r.rows)/r.took.Seconds(), byteText(r.bytes), r.found, ok)
	}
	fmt.Fprintf(&b, "\nGoal: equal tables at ≥ 200,000 rows/s (2,000,000 rows in ≤ 10 s), hashes not rows crossing the link; each accuracy case found and named. Section took %.0f s.\n", took.Seconds())
	return b.String()
}

func byteText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
