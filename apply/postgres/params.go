package postgres

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice"
)

// paramKind is the array type a column's values travel in, one array per
// column of a multi-row statement.
//
// Values go in the binary array format, which the server reads with
// array_recv: each element is its length and its bytes, with no quoting to
// write here and none to parse there. Text elements are the source's text
// form, cast by the statement to the column's type as before; the text
// form is the same, only its wrapping changed. Integer columns go as int2,
// int4 or int8 elements, parsed here, so the server runs no text input
// function for them: a value strconv.ParseInt reads in base 10 is one that
// int2in, int4in and int8in read as the same number. A column whose values
// do not all parse so (out of range, blanks) goes as text, and the server
// reports or accepts them as it always did.
type paramKind byte

const (
	textParam paramKind = iota
	int2Param
	int4Param
	int8Param
)

// kindFor is the kind a column's values are tried in first: the integer
// kind of the built-in integer types (a domain's cast names its base type),
// text for every other type.
func kindFor(c sqlColumn) paramKind {
	if c.TypeSchema != "pg_catalog" {
		return textParam
	}
	switch c.TypeName {
	case "int2":
		return int2Param
	case "int4":
		return int4Param
	case "int8":
		return int8Param
	}
	return textParam
}

// sqlType is the parameter's type as the statement declares it.
func (k paramKind) sqlType() string {
	switch k {
	case int2Param:
		return "int2[]"
	case int4Param:
		return "int4[]"
	case int8Param:
		return "int8[]"
	}
	return "text[]"
}

// oids are the array type and its element type.
func (k paramKind) oids() (array, elem uint32) {
	switch k {
	case int2Param:
		return pgtype.Int2ArrayOID, pgtype.Int2OID
	case int4Param:
		return pgtype.Int4ArrayOID, pgtype.Int4OID
	case int8Param:
		return pgtype.Int8ArrayOID, pgtype.Int8OID
	}
	return pgtype.TextArrayOID, pgtype.TextOID
}

// bits is the width of an integer kind's elements; 0 for text.
func (k paramKind) bits() int {
	switch k {
	case int2Param:
		return 16
	case int4Param:
		return 32
	case int8Param:
		return 64
	}
	return 0
}

// code is the kind as one byte of a statement cache key.
func (k paramKind) code() byte { return "t248"[k] }

// arrayParam is a statement parameter in the binary array format.
type arrayParam struct {
	oid  uint32 // the array type
	data []byte
}

// arraySize is the length of encodeArray's array of the values of column
// col of rows, when they all encode in kind k.
func arraySize(rows []sluice.Row, col int, k paramKind) int {
	bits := k.bits()
	size := 20
	for _, r := range rows {
		v := r[col]
		switch {
		case v.Null:
			size += 4
		case bits > 0:
			size += 4 + bits/8
		default:
			size += 4 + len(v.Text)
		}
	}
	return size
}

// encodeArray appends to buf the values of column col of rows as a
// one-dimensional binary array of kind k, and returns false when k is an
// integer kind and a value is not an integer of its width (the caller then
// sends the column as text); buf's appended part is then garbage.
func encodeArray(buf []byte, rows []sluice.Row, col int, k paramKind) ([]byte, bool) {
	_, elemOID := k.oids()
	bits := k.bits()
	if len(rows) == 0 {
		buf = binary.BigEndian.AppendUint32(buf, 0) // no dimensions: an empty array
		buf = binary.BigEndian.AppendUint32(buf, 0)
		buf = binary.BigEndian.AppendUint32(buf, elemOID)
		return buf, true
	}
	hasNull := uint32(0)
	for _, r := range rows {
		if r[col].Null {
			hasNull = 1
			break
		}
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, hasNull)
	buf = binary.BigEndian.AppendUint32(buf, elemOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(rows)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, r := range rows {
		v := r[col]
		if v.Null {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
			continue
		}
		if bits == 0 {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(v.Text)))
			buf = append(buf, v.Text...)
			continue
		}
		n, err := strconv.ParseInt(v.Text, 10, bits)
		if err != nil {
			return buf, false
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(bits/8))
		switch bits {
		case 16:
			buf = binary.BigEndian.AppendUint16(buf, uint16(n))
		case 32:
			buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		default:
			buf = binary.BigEndian.AppendUint64(buf, uint64(n))
		}
	}
	return buf, true
}

// paramArena is where a batch's arrays are encoded, its space reused by
// the next batch: a catch-up's arrays are a megabyte per few thousand
// rows, allocated (and zeroed) for each batch only to be copied into the
// connection's buffer. A Target has one, used under its lock: reset when a
// plan starts, when nothing refers to the last batch's parameters any more
// (the pipeline copies them into its wire buffer as it queues each
// statement, and nothing keeps them after).
type paramArena struct{ buf []byte }

// maxArena bounds the space an arena keeps between batches, and the size
// of the blocks it takes (one statement's arrays may take more).
const maxArena = 4 << 20

// reset frees the arena's space for a new batch.
func (a *paramArena) reset() {
	if cap(a.buf) > maxArena {
		a.buf = nil
	}
	a.buf = a.buf[:0]
}

// take returns an empty slice with room for n bytes: a fresh allocation
// for a nil arena.
func (a *paramArena) take(n int) []byte {
	if a == nil {
		return make([]byte, 0, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		// A new block: the arrays in the one before stay this batch's.
		a.buf = make([]byte, 0, max(n, min(2*cap(a.buf), maxArena), 64<<10))
	}
	return a.buf[len(a.buf):len(a.buf)]
}

// keep marks b, the slice take returned with what was appended to it, as
// used, unless appending outgrew it into memory of its own.
func (a *paramArena) keep(b []byte) {
	if a == nil || len(b) == 0 || cap(a.buf)-len(a.buf) < len(b) || &a.buf[len(a.buf):cap(a.buf)][0] != &b[0] {
		return
	}
	a.buf = a.buf[:len(a.buf)+len(b)]
}

// columnParams turns rows into one array parameter per column: the columns
// at the indexes in present (every column when present is nil), each in
// the kind kindFor gives cols[i], or text where its values do not all fit
// that kind. It returns the kinds used, aligned with the parameters. The
// arrays share one buffer, sized for the lot, taken from arena (nil: a new
// allocation).
func columnParams(arena *paramArena, rows []sluice.Row, present []int, cols []sqlColumn) ([]any, []paramKind) {
	if present == nil {
		present = make([]int, len(rows[0]))
		for i := range present {
			present[i] = i
		}
	}
	args := make([]any, len(present))
	kinds := make([]paramKind, len(present))
	params := make([]arrayParam, len(present))
	size := 0
	for i, c := range present {
		kinds[i] = kindFor(cols[c])
		size += arraySize(rows, c, kinds[i])
	}
	buf := arena.take(size)
	for i, c := range present {
		start := len(buf)
		var ok bool
		if buf, ok = encodeArray(buf, rows, c, kinds[i]); !ok {
			kinds[i] = textParam
			buf, _ = encodeArray(buf[:start], rows, c, textParam)
		}
		arrayOID, _ := kinds[i].oids()
		params[i] = arrayParam{oid: arrayOID, data: buf[start:len(buf):len(buf)]}
		args[i] = &params[i]
	}
	arena.keep(buf)
	return args, kinds
}

// wireParams encodes a statement's arguments for the extended protocol:
// strings as text of an unspecified type (the server infers it from the
// statement, as for a literal), nil as NULL, integers as text, and array
// parameters in binary with their type.
func wireParams(args []any) (values [][]byte, oids []uint32, formats []int16, err error) {
	values = make([][]byte, len(args))
	oids = make([]uint32, len(args))
	formats = make([]int16, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case nil:
		case string:
			values[i] = []byte(a)
		case int64:
			values[i] = strconv.AppendInt(nil, a, 10)
		case int:
			values[i] = strconv.AppendInt(nil, int64(a), 10)
		case *arrayParam:
			values[i], oids[i], formats[i] = a.data, a.oid, pgtype.BinaryFormatCode
		default:
			return nil, nil, nil, fmt.Errorf("statement parameter %d: unsupported type %T", i+1, a)
		}
	}
	return values, oids, formats, nil
}
