package pglogical

import (
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
)

// fakeStream is a recorded pgoutput stream: each message with the WAL
// position it was decoded from.
type fakeStream struct {
	msgs [][]byte
	at   []pglogrepl.LSN
	// changes is how many changes of the streamed table it holds.
	changes int
}

func beginMsg(final pglogrepl.LSN, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(final))
	b = binary.BigEndian.AppendUint64(b, 0) // commit time: the epoch
	return binary.BigEndian.AppendUint32(b, xid)
}

func commitMsg(commit, end pglogrepl.LSN) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

// recordStream builds txs transactions of perTx changes each of relation
// rel (id, name, n): inserts, with every third change an update of the
// row before and every seventh a delete.
func recordStream(rel uint32, txs, perTx int) *fakeStream {
	s := &fakeStream{}
	lsn := pglogrepl.LSN(0x1000000)
	id := 0
	for x := range txs {
		first := lsn
		var body [][]byte
		for i := range perTx {
			switch {
			case i%7 == 6:
				body = append(body, msg('D', rel, []byte{'K'}, tuple(strconv.Itoa(id), "\x00", "\x00")))
			case i%3 == 2:
				body = append(body, msg('U', rel, []byte{'N'}, tuple(strconv.Itoa(id), "name "+strconv.Itoa(id), strconv.Itoa(i))))
			default:
				id++
				body = append(body, msg('I', rel, []byte{'N'}, tuple(strconv.Itoa(id), "name "+strconv.Itoa(id), strconv.Itoa(x))))
			}
		}
		commit := first + pglogrepl.LSN(0x100*(perTx+1))
		s.add(first, beginMsg(commit, uint32(x+1)))
		for i, m := range body {
			s.add(first+pglogrepl.LSN(0x100*(i+1)), m)
		}
		s.add(commit, commitMsg(commit, commit+0x30))
		s.changes += perTx
		lsn = commit + 0x100
	}
	return s
}

func (s *fakeStream) add(at pglogrepl.LSN, m []byte) {
	s.msgs = append(s.msgs, m)
	s.at = append(s.at, at)
}

// testReader is a Reader with no server: its receiver's state is fed by
// walData, and Read hands out what it decoded.
func testReader(rel uint32) *Reader {
	tbl := &sluice.Table{Name: sluice.TableName{Schema: "public", Name: "t"},
		Columns: []sluice.Column{{Name: "id", Type: "integer"}, {Name: "name", Type: "text", Nullable: true}, {Name: "n", Type: "integer", Nullable: true}},
		Key:     []int{0}}
	typ := []colType{{oid: 23, base: 23}, {oid: 25, base: 25}, {oid: 23, base: 23}}
	info := &tableInfo{oid: rel, table: tbl, typ: typ, attnums: map[string]int16{"id": 1, "name": 2, "n": 3}}
	return &Reader{
		cfg:     Config{PollInterval: 50 * time.Millisecond, StatusInterval: time.Second, ProgressInterval: time.Second},
		log:     slog.New(slog.DiscardHandler),
		items:   make(chan item, bufferChanges),
		budget:  source.NewBudget(16 << 20),
		wake:    make(chan struct{}, 1),
		rels:    map[uint32]*relState{rel: {info: info, table: tbl, typ: typ, attnums: info.attnums, seen: true}},
		leaves:  map[uint32]*leafRel{},
		ignored: map[uint32]bool{},
	}
}

// feed hands s to the reader's receiver, as the replication session
// would, and ends with what the receiver does before it waits for more.
func (s *fakeStream) feed(ctx context.Context, r *Reader) error {
	for i, m := range s.msgs {
		if err := r.walData(ctx, s.at[i], m); err != nil {
			return err
		}
	}
	return r.sendPage(ctx)
}

// BenchmarkReadStream decodes a recorded stream of 10,000 inserts,
// updates and deletes in transactions of 10 and reads them as the stream
// does: the reader's CPU per change, from pgoutput message to Read.
func BenchmarkReadStream(b *testing.B) {
	const rel = 16384
	s := recordStream(rel, 1000, 10)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := testReader(rel)
		done := make(chan error, 1)
		go func() { done <- s.feed(ctx, r) }()
		got := 0
		for got < s.changes {
			cs, err := r.Read(ctx, 10_000)
			if err != nil {
				b.Fatal(err)
			}
			got += len(cs)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*s.changes), "ns/change")
}

// refEmitted is what Read recorded of the changes it handed out before
// pages: per change, from its token.
type refEmitted struct {
	last position
	mids []txStart
}

func (e *refEmitted) emitted(p position) {
	if p.inTx() && !(e.last.inTx() && e.last.lsn == p.lsn) {
		before := pglogrepl.LSN(0)
		if !e.last.inTx() {
			before = e.last.lsn
		}
		e.mids = append(e.mids, txStart{commit: p.lsn, before: before})
	}
	e.last = p
}

// TestReadPages: whatever it is asked for at a time, Read hands out the
// stream's changes in order, once, with the positions the receiver gave
// them, as capped slices; and it records what it handed out (the
// transactions handed out in part, the last position) as it did change by
// change, progress markers between the pages included.
func TestReadPages(t *testing.T) {
	const rel = 16384
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		txs, perTx  int
		max         int
		budget      int64
		idleEveryTx int // send an idle item after every so many transactions (0: never)
	}{
		{"one change transactions", 300, 1, 10_000, 16 << 20, 0},
		{"large reads", 200, 10, 10_000, 16 << 20, 0},
		{"reads of one", 50, 7, 1, 16 << 20, 0},
		{"reads across pages", 300, 9, 37, 16 << 20, 0},
		{"transactions larger than a page", 3, 1500, 100, 16 << 20, 0},
		{"small budget", 100, 10, 13, 2 << 10, 0},
		{"progress markers", 100, 3, 1000, 16 << 20, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := recordStream(rel, tc.txs, tc.perTx)
			r := testReader(rel)
			r.budget = source.NewBudget(tc.budget)
			r.cfg.ProgressInterval = 0
			done := make(chan error, 1)
			go func() {
				tx := 0
				for i, m := range s.msgs {
					if err := r.walData(ctx, s.at[i], m); err != nil {
						done <- err
						return
					}
					if m[0] == 'C' {
						tx++
						if tc.idleEveryTx > 0 && tx%tc.idleEveryTx == 0 {
							if err := r.sendPage(ctx); err != nil {
								done <- err
								return
							}
							r.items <- item{kind: itemIdle, lsn: s.at[i] + 0x80}
						}
					}
				}
				done <- r.sendPage(ctx)
			}()
			var ref refEmitted
			got, markers := 0, 0
			for got < s.changes {
				cs, err := r.Read(ctx, tc.max)
				if err != nil {
					t.Fatal(err)
				}
				if len(cs) > tc.max || cap(cs) != len(cs) {
					t.Fatalf("Read(%d) returned %d changes, cap %d", tc.max, len(cs), cap(cs))
				}
				for _, c := range cs {
					p, _, err := parsePosition(c.Pos)
					if err != nil {
						t.Fatal(err)
					}
					if c.Op == sluice.OpProgress {
						markers++
						ref.last = p
						continue
					}
					ref.emitted(p)
					got++
				}
				r.mu.Lock()
				last, mids := r.lastEmitted, slices.Clone(r.mids)
				r.mu.Unlock()
				if last != ref.last || !slices.Equal(mids, ref.mids) {
					t.Fatalf("after %d changes: last emitted %v, mids %v; want %v, %v", got, last, mids, ref.last, ref.mids)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if tc.idleEveryTx > 0 && markers == 0 {
				t.Error("no progress marker handed out")
			}
			if u := r.budget.Used(); u != 0 {
				t.Errorf("budget holds %d bytes after every change was read", u)
			}
			if want := tc.txs * tc.perTx; got != want {
				t.Errorf("read %d changes, want %d", got, want)
			}
		})
	}
}

// TestReadPositions: the changes come out in the stream's order, each
// with its position: inside its transaction but the last, which ends it.
func TestReadPositions(t *testing.T) {
	const rel = 16384
	ctx := context.Background()
	s := recordStream(rel, 20, 4)
	r := testReader(rel)
	if err := s.feed(ctx, r); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for len(tokens) < s.changes {
		cs, err := r.Read(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			tokens = append(tokens, c.Pos.Token)
		}
	}
	k := 0
	for i, m := range s.msgs {
		switch m[0] {
		case 'B':
			k = 0
		case 'C':
			end := pglogrepl.LSN(binary.BigEndian.Uint64(m[10:]))
			if want := (position{lsn: end}).token(); tokens[0] != want {
				t.Fatalf("last change of a transaction at %s, want %s", tokens[0], want)
			}
			tokens = tokens[1:]
		default:
			if k > 0 {
				commit := pglogrepl.LSN(binary.BigEndian.Uint64(s.msgs[i-k-1][1:]))
				if want := (position{lsn: commit, at: s.at[i-1]}).token(); tokens[0] != want {
					t.Fatalf("change at %s, want %s", tokens[0], want)
				}
				tokens = tokens[1:]
			}
			k++
		}
	}
}
