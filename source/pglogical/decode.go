package pglogical

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// tupleBuf decodes a pgoutput TupleData into memory reused from one message
// to the next. pglogrepl's decoder allocates a message, a tuple and every
// column and copies each value byte by byte; on a backlog that was a
// visible part of the reader's CPU. The columns' Data slices point into
// the message, so they are valid only until the next message is read: the
// reader copies them into strings (see Reader.tuple) before that.
type tupleBuf struct {
	td   pglogrepl.TupleData
	cols []pglogrepl.TupleDataColumn
	ptrs []*pglogrepl.TupleDataColumn
}

// decode reads a TupleData from the start of src and returns its length.
// Unlike pglogrepl's decoder, it checks every length against src.
func (b *tupleBuf) decode(src []byte) (int, error) {
	if len(src) < 2 {
		return 0, fmt.Errorf("tuple data: %d bytes, want at least 2", len(src))
	}
	n := int(binary.BigEndian.Uint16(src))
	off := 2
	if cap(b.cols) < n {
		b.cols = make([]pglogrepl.TupleDataColumn, n)
		b.ptrs = make([]*pglogrepl.TupleDataColumn, n)
	}
	b.cols, b.ptrs = b.cols[:n], b.ptrs[:n]
	for i := range n {
		if off >= len(src) {
			return 0, fmt.Errorf("tuple data: column %d of %d: the message ends", i+1, n)
		}
		c := &b.cols[i]
		*c = pglogrepl.TupleDataColumn{DataType: src[off]}
		off++
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(src)-off < 4 {
				return 0, fmt.Errorf("tuple data: column %d of %d: the message ends in its length", i+1, n)
			}
			l := binary.BigEndian.Uint32(src[off:])
			off += 4
			if uint64(len(src)-off) < uint64(l) {
				return 0, fmt.Errorf("tuple data: column %d of %d: %d bytes announced, %d left", i+1, n, l, len(src)-off)
			}
			c.Length, c.Data = l, src[off:off+int(l)]
			off += int(l)
		default:
			return 0, fmt.Errorf("tuple data: column %d of %d: unknown kind %q", i+1, n, c.DataType)
		}
		b.ptrs[i] = c
	}
	b.td.ColumnNum, b.td.Columns = uint16(n), b.ptrs
	return off, nil
}

// rowMessage is an insert, update or delete message of pgoutput's protocol
// version 1, decoded into the reader's reused buffers.
type rowMessage struct {
	rel      uint32
	old, new *pglogrepl.TupleData // nil when the message has none
}

// decodeRowMessage decodes data when it is an insert ('I'), update ('U')
// or delete ('D') message; ok is false for every other message.
func decodeRowMessage(data []byte, oldBuf, newBuf *tupleBuf) (m rowMessage, ok bool, err error) {
	if len(data) == 0 {
		return m, false, nil
	}
	kind := data[0]
	if kind != 'I' && kind != 'U' && kind != 'D' {
		return m, false, nil
	}
	if len(data) < 6 {
		return m, true, fmt.Errorf("message %c: %d bytes, want at least 6", kind, len(data))
	}
	name := "insert"
	switch kind {
	case 'U':
		name = "update"
	case 'D':
		name = "delete"
	}
	m.rel = binary.BigEndian.Uint32(data[1:])
	off := 5
	if kind != 'I' && (data[off] == 'K' || data[off] == 'O') {
		n, err := oldBuf.decode(data[off+1:])
		if err != nil {
			return m, true, fmt.Errorf("%s message, old tuple: %w", name, err)
		}
		m.old = &oldBuf.td
		off += 1 + n
	}
	if kind == 'D' {
		if m.old == nil {
			return m, true, fmt.Errorf("delete message: tuple kind %q, want K or O", data[off])
		}
		return m, true, nil
	}
	if off >= len(data) || data[off] != 'N' {
		return m, true, fmt.Errorf("%s message: no new tuple (N)", name)
	}
	if _, err := newBuf.decode(data[off+1:]); err != nil {
		return m, true, fmt.Errorf("%s message, new tuple: %w", name, err)
	}
	m.new = &newBuf.td
	return m, true, nil
}
