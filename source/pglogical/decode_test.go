package pglogical

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/sluice-cdc/sluice"
)

// tuple encodes a TupleData: "\x00" is NULL, "\x01" an unchanged TOAST
// value, anything else a text value.
func tuple(vals ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		switch v {
		case "\x00":
			b = append(b, 'n')
		case "\x01":
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

func msg(kind byte, rel uint32, parts ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{kind}, rel)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// sameTuple compares a decoded tuple with pglogrepl's.
func sameTuple(t *testing.T, what string, got, want *pglogrepl.TupleData) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	if got == nil {
		return
	}
	if got.ColumnNum != want.ColumnNum || len(got.Columns) != len(want.Columns) {
		t.Fatalf("%s: %d columns, want %d", what, len(got.Columns), len(want.Columns))
	}
	for i, c := range got.Columns {
		w := want.Columns[i]
		if c.DataType != w.DataType || c.Length != w.Length || !bytes.Equal(c.Data, w.Data) {
			t.Errorf("%s column %d: %c %d %q, want %c %d %q", what, i, c.DataType, c.Length, c.Data, w.DataType, w.Length, w.Data)
		}
	}
}

// checkAgainstPglogrepl decodes data both ways and compares; it reports
// whether ours decoded it.
func checkAgainstPglogrepl(t *testing.T, data []byte) bool {
	t.Helper()
	var oldBuf, newBuf tupleBuf
	m, ok, err := decodeRowMessage(data, &oldBuf, &newBuf)
	if !ok || err != nil {
		return false
	}
	ref, perr := pglogrepl.Parse(data)
	if perr != nil && (m.new != nil && m.new.ColumnNum == 0 || m.old != nil && m.old.ColumnNum == 0) {
		// pglogrepl's length check refuses a tuple of no columns, which
		// no published table (it has a key) sends.
		return true
	}
	if perr != nil {
		t.Fatalf("decoded %q, which pglogrepl refuses: %v", data, perr)
	}
	switch r := ref.(type) {
	case *pglogrepl.InsertMessage:
		if m.rel != r.RelationID || m.old != nil {
			t.Fatalf("insert: rel %d old %v, want %d", m.rel, m.old, r.RelationID)
		}
		sameTuple(t, "insert", m.new, r.Tuple)
	case *pglogrepl.UpdateMessage:
		if m.rel != r.RelationID {
			t.Fatalf("update: rel %d, want %d", m.rel, r.RelationID)
		}
		sameTuple(t, "update old", m.old, r.OldTuple)
		sameTuple(t, "update new", m.new, r.NewTuple)
	case *pglogrepl.DeleteMessage:
		if m.rel != r.RelationID || m.new != nil {
			t.Fatalf("delete: rel %d new %v, want %d", m.rel, m.new, r.RelationID)
		}
		sameTuple(t, "delete", m.old, r.OldTuple)
	default:
		t.Fatalf("decoded a %T", ref)
	}
	return true
}

func TestDecodeRowMessage(t *testing.T) {
	long := string(bytes.Repeat([]byte("x"), 70000))
	cases := []struct {
		name string
		data []byte
		ok   bool // decoded without error
	}{
		{"insert", msg('I', 16384, []byte{'N'}, tuple("1", "\x00", "héllo", "")), true},
		{"insert long value", msg('I', 7, []byte{'N'}, tuple(long)), true},
		{"update", msg('U', 16384, []byte{'N'}, tuple("1", "\x01", "b")), true},
		{"update with key", msg('U', 16384, []byte{'K'}, tuple("1", "\x00", "\x00"), []byte{'N'}, tuple("2", "x", "y")), true},
		{"update with old row", msg('U', 16384, []byte{'O'}, tuple("1", "a", "b"), []byte{'N'}, tuple("1", "a", "c")), true},
		{"delete by key", msg('D', 16384, []byte{'K'}, tuple("1", "\x00")), true},
		{"delete old row", msg('D', 16384, []byte{'O'}, tuple("1", "a")), true},
		{"no columns", msg('I', 1, []byte{'N'}, tuple()), true},
		{"insert without N", msg('I', 1, []byte{'K'}, tuple("1")), false},
		{"delete without K or O", msg('D', 1, []byte{'N'}, tuple("1")), false},
		{"truncated length", msg('I', 1, []byte{'N', 0, 1, 't', 0, 0}), false},
		{"value past the end", msg('I', 1, []byte{'N', 0, 1, 't', 0, 0, 0, 9, 'a'}), false},
		{"missing column", msg('I', 1, []byte{'N', 0, 2, 'n'}), false},
		{"unknown kind", msg('I', 1, []byte{'N', 0, 1, 'z'}), false},
		{"short", []byte{'I', 0, 0}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkAgainstPglogrepl(t, c.data); got != c.ok {
				var o, n tupleBuf
				_, _, err := decodeRowMessage(c.data, &o, &n)
				t.Fatalf("decoded: %v (%v), want %v", got, err, c.ok)
			}
		})
	}
	// Other messages are left to pglogrepl.
	for _, kind := range []byte{'B', 'C', 'R', 'T', 'Y', 'O'} {
		var o, n tupleBuf
		if _, ok, _ := decodeRowMessage([]byte{kind, 0, 0, 0, 0, 0}, &o, &n); ok {
			t.Errorf("message %c taken as a row message", kind)
		}
	}
}

// FuzzDecodeRowMessage: whatever the bytes, decoding does not panic, and
// what it decodes pglogrepl decodes the same.
func FuzzDecodeRowMessage(f *testing.F) {
	f.Add(msg('I', 16384, []byte{'N'}, tuple("1", "\x00", "x")))
	f.Add(msg('U', 16384, []byte{'K'}, tuple("1"), []byte{'N'}, tuple("2", "\x01")))
	f.Add(msg('D', 16384, []byte{'O'}, tuple("1", "a")))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstPglogrepl(t, data)
	})
}

// checkTxAgainstPglogrepl decodes a begin or commit message both ways and
// compares; it reports whether ours decoded it.
func checkTxAgainstPglogrepl(t *testing.T, data []byte) bool {
	t.Helper()
	m, ok, err := decodeTxMessage(data)
	if !ok || err != nil {
		return false
	}
	ref, perr := pglogrepl.Parse(data)
	if perr != nil {
		t.Fatalf("decoded %q, which pglogrepl refuses: %v", data, perr)
	}
	switch r := ref.(type) {
	case *pglogrepl.BeginMessage:
		if m.kind != 'B' || m.final != r.FinalLSN || m.xid != r.Xid || !m.time.Equal(r.CommitTime) {
			t.Fatalf("begin: %+v, want %+v", m, r)
		}
	case *pglogrepl.CommitMessage:
		if m.kind != 'C' || m.end != r.TransactionEndLSN || !m.time.Equal(r.CommitTime) {
			t.Fatalf("commit: %+v, want %+v", m, r)
		}
	default:
		t.Fatalf("decoded a %T", ref)
	}
	return true
}

func TestDecodeTxMessage(t *testing.T) {
	begin := beginMsg(0x16B3748, 771)
	binary.BigEndian.PutUint64(begin[9:], 818_000_000_123_456) // 2025-12-03 and some microseconds
	commit := commitMsg(0x16B3748, 0x16B3778)
	binary.BigEndian.PutUint64(commit[18:], 818_000_000_123_457)
	for _, c := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"begin", begin, true},
		{"commit", commit, true},
		{"short begin", begin[:20], false},
		{"short commit", commit[:25], false},
		{"longer begin", append(begin, 0), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := checkTxAgainstPglogrepl(t, c.data); got != c.ok {
				t.Fatalf("decoded: %v, want %v", got, c.ok)
			}
		})
	}
	for _, kind := range []byte{'I', 'U', 'D', 'R', 'T', 'Y', 'O', 'M'} {
		if _, ok, _ := decodeTxMessage([]byte{kind, 0, 0, 0, 0, 0}); ok {
			t.Errorf("message %c taken as a begin or commit", kind)
		}
	}
}

// FuzzDecodeTxMessage: whatever the bytes, decoding does not panic, and
// what it decodes pglogrepl decodes the same.
func FuzzDecodeTxMessage(f *testing.F) {
	f.Add(beginMsg(0x16B3748, 771))
	f.Add(commitMsg(0x16B3748, 0x16B3778))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkTxAgainstPglogrepl(t, data)
	})
}

// TestChangeKeys: a change's key is the key of its old tuple (a key
// tuple, or a whole old row, of the table or of a leaf partition whose
// columns come in another order), or of its new row for an update
// without one; as Table.KeyOf of the decoded old row gives it.
func TestChangeKeys(t *testing.T) {
	const rel = 16384
	r := testReader(rel)
	rs := r.rels[rel]
	// A key of two columns, (n, id), to see the order kept.
	tbl := *rs.table
	tbl.Key = []int{2, 0}
	rs.table = &tbl
	r.tx = txState{open: true, commit: 0x100}
	var oldBuf, newBuf tupleBuf
	decode := func(data []byte) rowMessage {
		m, ok, err := decodeRowMessage(data, &oldBuf, &newBuf)
		if !ok || err != nil {
			t.Fatalf("decode %q: %v", data, err)
		}
		return m
	}
	for _, c := range []struct {
		name string
		perm []int
		data []byte
		op   sluice.Op
		want sluice.Row
	}{
		{"delete by key", nil, msg('D', rel, []byte{'K'}, tuple("7", "\x00", "8")), sluice.OpDelete, sluice.Row{sluice.Text("8"), sluice.Text("7")}},
		{"delete of a whole row", nil, msg('D', rel, []byte{'O'}, tuple("7", "x", "8")), sluice.OpDelete, sluice.Row{sluice.Text("8"), sluice.Text("7")}},
		{"update of the key", nil, msg('U', rel, []byte{'K'}, tuple("7", "\x00", "8"), []byte{'N'}, tuple("9", "y", "8")), sluice.OpUpdate, sluice.Row{sluice.Text("8"), sluice.Text("7")}},
		{"update without old key", nil, msg('U', rel, []byte{'N'}, tuple("9", "y", "10")), sluice.OpUpdate, sluice.Row{sluice.Text("10"), sluice.Text("9")}},
		// The leaf's columns are (n, name, id).
		{"leaf delete", []int{2, 1, 0}, msg('D', rel, []byte{'K'}, tuple("8", "\x00", "7")), sluice.OpDelete, sluice.Row{sluice.Text("8"), sluice.Text("7")}},
		{"leaf update", []int{2, 1, 0}, msg('U', rel, []byte{'N'}, tuple("10", "y", "9")), sluice.OpUpdate, sluice.Row{sluice.Text("10"), sluice.Text("9")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := decode(c.data)
			var key sluice.Row
			var err error
			if m.old != nil {
				key, err = r.key(rs, m.old, c.perm)
				if err != nil {
					t.Fatal(err)
				}
				old, err := r.tuple(rs, m.old, c.perm, 0)
				if err != nil {
					t.Fatal(err)
				}
				if want := tbl.KeyOf(old); !slices.Equal(key, want) {
					t.Fatalf("key %v, KeyOf the old row %v", key, want)
				}
			} else {
				row, err := r.tuple(rs, m.new, c.perm, len(tbl.Key))
				if err != nil {
					t.Fatal(err)
				}
				if cap(row) != len(row)+len(tbl.Key) {
					t.Fatalf("row of %d values has room for %d more, want %d", len(row), cap(row)-len(row), len(tbl.Key))
				}
				key = tbl.KeyOf(row)
			}
			if !slices.Equal(key, c.want) {
				t.Fatalf("key %v, want %v", key, c.want)
			}
			// And through change, as the receiver builds it.
			r.hasHeld = false
			r.tx.skipAll = false
			if err := r.change(context.Background(), 0x50, rel, c.op, m.old, m.new); err != nil {
				t.Fatal(err)
			}
			if c.perm != nil {
				return // change finds a leaf by its relation, not by perm
			}
			if !r.hasHeld || !slices.Equal(r.held.Key, c.want) {
				t.Fatalf("change held %v with key %v, want %v", r.hasHeld, r.held.Key, c.want)
			}
			if c.op == sluice.OpUpdate && cap(r.held.Row) != len(r.held.Row) {
				t.Fatalf("an update's row has cap %d, len %d: an append would write over its key", cap(r.held.Row), len(r.held.Row))
			}
		})
	}
}
