package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/sluice-cdc/sluice"
)

// The reader decodes rows events itself, from the event's bytes straight
// into sluice.Row text: go-mysql's decoding boxes every value in an any,
// builds a map of the table's signedness per row image and a []any per
// row, all of which convertRow then turned into text again. The output
// is byte for byte what go-mysql's decoding followed by colDef.convert
// gives (FuzzRowsDecode compares the two); whatever this decoder does not
// handle (JSON columns, which go-mysql renders from MySQL's binary JSON,
// row images missing columns, unknown types or metadata, PARTIAL_UPDATE
// and v0 events) is left to go-mysql's decoding as before.

// rawRows is a rows event's row images as the event carries them (for a
// MariaDB compressed event, still compressed). keepRawRows leaves a
// pointer to it as the only value of the only row of RowsEvent.Rows:
// the event reaches state.rows through go-mysql's channel as a
// *RowsEvent and nothing else, and Rows is the field that holds rows. A
// real decoded value is never of this package's type, so the marker
// cannot be mistaken for a row.
type rawRows []byte

// rawMarker holds the marker and the slices of e.Rows that carry it, in
// one allocation.
type rawMarker struct {
	raw  rawRows
	vals [1]any
	rows [1][]any
}

// keepRawRows is the syncer's RowsEventDecodeFunc: it decodes the event's
// header (table id, flags, column bitmaps) and keeps the row images for
// state.rows. The bytes are the packet's: go-mysql reads every packet
// into a new buffer (and decompresses a transaction payload into a new
// one) and never reuses it, so the sub-slice stays valid.
func keepRawRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	m := &rawMarker{raw: data[pos:]}
	m.vals[0] = &m.raw
	m.rows[0] = m.vals[:]
	e.Rows = m.rows[:]
	return nil
}

// rawRowsOf returns the row images keepRawRows left in the event.
func rawRowsOf(e *replication.RowsEvent) (rawRows, bool) {
	if len(e.Rows) != 1 || len(e.Rows[0]) != 1 {
		return nil, false
	}
	r, ok := e.Rows[0][0].(*rawRows)
	if !ok {
		return nil, false
	}
	return *r, true
}

// valKind is how a column's values are laid out and rendered.
type valKind uint8

const (
	kUnknown    valKind = iota
	kInt                // little-endian integer of size bytes
	kFloat              // FLOAT
	kDouble             // DOUBLE
	kDecimal            // NEWDECIMAL, binary decimal of size bytes
	kBit                // BIT, size bytes big-endian
	kYear               // YEAR, one byte
	kEnum               // ENUM index of size bytes
	kSet                // SET bitmap of size bytes
	kDate               // DATE, 3 bytes
	kTime               // TIME (old), 3 bytes
	kTime2              // TIME2
	kDatetime           // DATETIME (old), 8 bytes
	kDatetime2          // DATETIME2
	kTimestamp          // TIMESTAMP (old), 4 bytes
	kTimestamp2         // TIMESTAMP2
	kString             // CHAR, VARCHAR: length prefix of size bytes
	kBlob               // BLOB, TEXT, GEOMETRY, VECTOR: length prefix of size bytes
	kJSON               // JSON: length prefix of size bytes; walked, not rendered here
)

// colCodec is how one column of a table map is read, prepared once per
// table map.
type colCodec struct {
	kind     valKind
	prefix   bool // size is a length prefix, not the value's width
	size     int
	unsigned bool
	dec      int // fractional-second digits
	prec     int // NEWDECIMAL precision and scale
	scale    int
	def      *colDef // nil when only walked
}

// stringMeta reads a STRING column's metadata: its real type (STRING,
// ENUM or SET) and its length in bytes (a CHAR's or BINARY's; an ENUM's
// or SET's is its pack length), as MySQL's Field_string writes them.
func stringMeta(meta uint16) (tp byte, length int) {
	if meta < 256 {
		return mysql.MYSQL_TYPE_STRING, int(meta)
	}
	b0, b1 := byte(meta>>8), byte(meta&0xff)
	if b0&0x30 != 0x30 {
		return b0 | 0x30, int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
	}
	return b0, int(b1)
}

// layoutOf reads a column's type and metadata the way go-mysql's
// decodeValue does; ok is false for what the native decoder leaves to
// go-mysql (an unknown type, or metadata go-mysql rejects or misreads).
func layoutOf(tp byte, meta uint16) (c colCodec, ok bool) {
	length := 0
	if tp == mysql.MYSQL_TYPE_STRING {
		tp, length = stringMeta(meta)
	}
	fixed := func(k valKind, n int) (colCodec, bool) { return colCodec{kind: k, size: n}, true }
	prefixed := func(k valKind, n int) (colCodec, bool) { return colCodec{kind: k, size: n, prefix: true}, true }
	switch tp {
	case mysql.MYSQL_TYPE_TINY:
		return fixed(kInt, 1)
	case mysql.MYSQL_TYPE_SHORT:
		return fixed(kInt, 2)
	case mysql.MYSQL_TYPE_INT24:
		return fixed(kInt, 3)
	case mysql.MYSQL_TYPE_LONG:
		return fixed(kInt, 4)
	case mysql.MYSQL_TYPE_LONGLONG:
		return fixed(kInt, 8)
	case mysql.MYSQL_TYPE_FLOAT:
		return fixed(kFloat, 4)
	case mysql.MYSQL_TYPE_DOUBLE:
		return fixed(kDouble, 8)
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		prec, scale := int(meta>>8), int(meta&0xff)
		if prec < 1 || prec > 65 || scale > prec {
			return colCodec{}, false // go-mysql fails on these (index out of range)
		}
		c, _ := fixed(kDecimal, decimalSize(prec, scale))
		c.prec, c.scale = prec, scale
		return c, true
	case mysql.MYSQL_TYPE_BIT:
		nbits := int(meta>>8)*8 + int(meta&0xff)
		n := (nbits + 7) / 8
		if n < 1 || n > 8 {
			return colCodec{}, false
		}
		return fixed(kBit, n)
	case mysql.MYSQL_TYPE_YEAR:
		return fixed(kYear, 1)
	case mysql.MYSQL_TYPE_ENUM:
		if l := int(meta & 0xff); l == 1 || l == 2 {
			return fixed(kEnum, l)
		}
	case mysql.MYSQL_TYPE_SET:
		if n := int(meta & 0xff); n >= 1 && n <= 8 {
			return fixed(kSet, n)
		}
	case mysql.MYSQL_TYPE_DATE:
		return fixed(kDate, 3)
	case mysql.MYSQL_TYPE_TIME:
		return fixed(kTime, 3)
	case mysql.MYSQL_TYPE_DATETIME:
		return fixed(kDatetime, 8)
	case mysql.MYSQL_TYPE_TIMESTAMP:
		return fixed(kTimestamp, 4)
	case mysql.MYSQL_TYPE_TIME2, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIMESTAMP2:
		if meta > 6 {
			return colCodec{}, false
		}
		dec := int(meta)
		k, n := kTime2, 3
		switch tp {
		case mysql.MYSQL_TYPE_DATETIME2:
			k, n = kDatetime2, 5
		case mysql.MYSQL_TYPE_TIMESTAMP2:
			k, n = kTimestamp2, 4
		}
		c, _ := fixed(k, n+(dec+1)/2)
		c.dec = dec
		return c, true
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		if meta < 256 {
			return prefixed(kString, 1)
		}
		return prefixed(kString, 2)
	case mysql.MYSQL_TYPE_STRING:
		if length < 256 {
			return prefixed(kString, 1)
		}
		return prefixed(kString, 2)
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_VECTOR:
		if meta >= 1 && meta <= 4 {
			return prefixed(kBlob, int(meta))
		}
	case mysql.MYSQL_TYPE_JSON:
		if meta >= 1 && meta <= 4 {
			return prefixed(kJSON, int(meta))
		}
	}
	return colCodec{}, false
}

// goMySQLType is the type go-mysql decodes a column as: a CHAR's
// metadata names its real type (ENUM, SET), which it reads with fewer
// checks than colDefs.
func goMySQLType(tp byte, meta uint16) byte {
	if tp != mysql.MYSQL_TYPE_STRING || meta < 256 {
		return tp
	}
	b0 := byte(meta >> 8)
	if b0&0x30 != 0x30 {
		return b0 | 0x30
	}
	return b0
}

var decimalBytes = [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}

// decimalSize is the bytes of a binary DECIMAL(prec, scale).
func decimalSize(prec, scale int) int {
	integral := prec - scale
	return integral/9*4 + decimalBytes[integral%9] + scale/9*4 + decimalBytes[scale%9]
}

// walkCodecs lays out a table map's columns for counting rows; ok is false
// when a column's layout is unknown.
func walkCodecs(tm *replication.TableMapEvent) ([]colCodec, bool) {
	cols := make([]colCodec, len(tm.ColumnType))
	for i, tp := range tm.ColumnType {
		var ok bool
		if cols[i], ok = layoutOf(tp, tm.ColumnMeta[i]); !ok {
			return nil, false
		}
	}
	return cols, true
}

// rowCodecs prepares the native decoding of a streamed table's columns;
// nil when a column is one go-mysql must decode (JSON, or a layout the
// native decoder does not know).
func rowCodecs(defs []colDef) []colCodec {
	cols := make([]colCodec, len(defs))
	for i := range defs {
		d := &defs[i]
		c, ok := layoutOf(d.rawTyp, d.meta)
		if !ok || c.kind == kJSON || goMySQLType(d.rawTyp, d.meta) != d.typ {
			// The last: a CHAR whose metadata go-mysql reads as another
			// type than colDefs does (convert fails on its values).
			return nil
		}
		c.unsigned, c.def = d.unsigned, d
		cols[i] = c
	}
	return cols
}

var errShortRow = errors.New("row image is shorter than its columns")

// valueLen is the bytes of the value at the start of data.
func (c *colCodec) valueLen(data []byte) (int, error) {
	if !c.prefix {
		if len(data) < c.size {
			return 0, errShortRow
		}
		return c.size, nil
	}
	if len(data) < c.size {
		return 0, errShortRow
	}
	var l uint64
	for i := c.size - 1; i >= 0; i-- {
		l = l<<8 | uint64(data[i])
	}
	if l > uint64(len(data)-c.size) {
		return 0, errShortRow
	}
	return c.size + int(l), nil
}

// bitmapFull reports whether a rows event's column bitmap has every one of
// the table's n columns.
func bitmapFull(bm []byte, n int) bool {
	if len(bm) < (n+7)/8 {
		return false
	}
	for i := range n {
		if bm[i>>3]&(1<<(i&7)) == 0 {
			return false
		}
	}
	return true
}

// countImages walks the row images of an event of a table whose values
// are not wanted, for the number of images. bm1 and bm2 are the event's
// column bitmaps (bm2 nil but for updates).
func countImages(data []byte, cols []colCodec, bm1, bm2 []byte) (int, error) {
	if bm1 == nil {
		return 0, errors.New("rows event without a column bitmap")
	}
	n := 0
	for pos := 0; pos < len(data); {
		for _, bm := range [2][]byte{bm1, bm2} {
			if bm == nil {
				continue
			}
			w, err := walkImage(data[pos:], cols, bm)
			if err != nil {
				return 0, err
			}
			pos += w
			n++
		}
	}
	return n, nil
}

// walkImage returns the bytes of one row image; bm says which columns
// the image holds.
func walkImage(data []byte, cols []colCodec, bm []byte) (int, error) {
	if len(bm) < (len(cols)+7)/8 {
		return 0, errShortRow
	}
	present := 0
	for i := range cols {
		if bm[i>>3]&(1<<(i&7)) != 0 {
			present++
		}
	}
	nb := (present + 7) / 8
	if len(data) < nb || nb == 0 {
		// No column at all would walk no byte, forever.
		return 0, errShortRow
	}
	nulls, pos, k := data[:nb], nb, 0
	for i := range cols {
		if bm[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		null := nulls[k>>3]&(1<<(k&7)) != 0
		k++
		if null {
			continue
		}
		w, err := cols[i].valueLen(data[pos:])
		if err != nil {
			return 0, err
		}
		pos += w
	}
	return pos, nil
}

// span is one decoded value: where its text is in the event's text, or
// a NULL, or an ENUM index that has no label.
type span struct {
	start, end int
	flag       spanFlag
}

type spanFlag uint8

const (
	spanText    spanFlag = iota // kept text
	spanDropped                 // text in the dropped buffer, checked and not kept
	spanNull
	spanBadEnum // start holds the index
	spanRaw     // kept text, not charset-decoded
)

// rowsDecoder decodes the row images of one event into spans. Its
// buffers are reused from event to event.
type rowsDecoder struct {
	keep    []byte // text of the values handed out
	dropped []byte // text of before-image columns outside the key
	spans   []span
	images  int

	droppedStr  string
	droppedDone bool
}

// maxKeptBuffer bounds the buffers a decoder keeps between events: an
// event of large values (a LONGTEXT's) leaves them to the collector.
const maxKeptBuffer = 1 << 20

// release drops buffers an unusually large event grew.
func (d *rowsDecoder) release() {
	if cap(d.keep) > maxKeptBuffer {
		d.keep = nil
	}
	if cap(d.dropped) > maxKeptBuffer {
		d.dropped = nil
	}
	if cap(d.spans) > maxKeptBuffer/16 {
		d.spans = nil
	}
	d.droppedStr = ""
}

func (d *rowsDecoder) reset() {
	d.keep, d.dropped, d.spans, d.images = d.keep[:0], d.dropped[:0], d.spans[:0], 0
	d.droppedStr, d.droppedDone = "", false
}

// decode walks the event's images. Every image of an insert and the
// after images of an update are kept whole; of a before image only the
// key columns (isKey) are kept: the others are rendered into the dropped
// buffer, where they are still checked (as convertRow checked them) but
// do not hold memory after the event.
func (d *rowsDecoder) decode(data []byte, cols []colCodec, update, before bool, isKey []bool) error {
	d.reset()
	ncols := len(cols)
	nb := (ncols + 7) / 8
	for pos := 0; pos < len(data); {
		for img := 0; img < 2; img++ {
			if img == 1 && !update {
				break
			}
			beforeImg := before && img == 0
			if len(data)-pos < nb || nb == 0 {
				return errShortRow
			}
			nulls := data[pos : pos+nb]
			pos += nb
			for i := range cols {
				if nulls[i>>3]&(1<<(i&7)) != 0 {
					d.spans = append(d.spans, span{flag: spanNull})
					continue
				}
				c := &cols[i]
				w, err := c.valueLen(data[pos:])
				if err != nil {
					return err
				}
				v := data[pos : pos+w]
				pos += w
				drop := beforeImg && !isKey[i]
				buf := &d.keep
				if drop {
					buf = &d.dropped
				}
				start := len(*buf)
				var note int64
				*buf, note, err = c.render(*buf, v)
				if err != nil {
					return err
				}
				sp := span{start: start, end: len(*buf)}
				switch {
				case note > 0:
					sp = span{start: int(note), flag: spanBadEnum}
				case note == rawText:
					sp.flag = spanRaw
				}
				if drop && sp.flag == spanText {
					sp.flag = spanDropped
				} else if drop && sp.flag == spanRaw {
					sp.flag = spanNull // nothing to check, nothing kept
				}
				d.spans = append(d.spans, sp)
			}
			d.images++
		}
	}
	return nil
}

// render appends a value's text as colDef.convert gives it for go-mysql's
// decoding of the same bytes (before charset decoding, which values get
// when handed out). v is exactly the value's bytes. note is an ENUM index
// with no label, or rawText for text that skips charset decoding.
func (c *colCodec) render(dst, v []byte) (out []byte, note int64, err error) {
	d := c.def
	switch c.kind {
	case kInt:
		var u uint64
		for i := c.size - 1; i >= 0; i-- {
			u = u<<8 | uint64(v[i])
		}
		if c.unsigned {
			return strconv.AppendUint(dst, u, 10), 0, nil
		}
		shift := uint(64 - 8*c.size)
		return strconv.AppendInt(dst, int64(u<<shift)>>shift, 10), 0, nil
	case kFloat:
		f := math.Float32frombits(binary.LittleEndian.Uint32(v))
		return append(dst, formatFloat(float64(f), 32, d.mariadb)...), 0, nil
	case kDouble:
		f := math.Float64frombits(binary.LittleEndian.Uint64(v))
		return append(dst, formatFloat(f, 64, d.mariadb)...), 0, nil
	case kDecimal:
		return appendDecimal(dst, v, c.prec, c.scale)
	case kBit:
		return append(dst, v...), 0, nil
	case kYear:
		if v[0] == 0 {
			return append(dst, "0000"...), 0, nil
		}
		return strconv.AppendInt(dst, 1900+int64(v[0]), 10), 0, nil
	case kEnum:
		x := int64(v[0])
		if c.size == 2 {
			x = int64(binary.LittleEndian.Uint16(v))
		}
		switch {
		case x == 0:
			return dst, 0, nil // the error value '' of a non-strict insert
		case int(x) <= len(d.labels):
			return append(dst, d.labels[x-1]...), 0, nil
		}
		return dst, x, nil
	case kSet:
		var x uint64
		for i := c.size - 1; i >= 0; i-- {
			x = x<<8 | uint64(v[i])
		}
		first := true
		for i, l := range d.labels {
			if i < 64 && x&(1<<uint(i)) != 0 {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = append(dst, l...)
			}
		}
		return dst, 0, nil
	case kDate:
		u := uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16
		if u == 0 {
			return append(dst, "0000-00-00"...), 0, nil
		}
		dst = appendInt(dst, int64(u/(16*32)), 4)
		dst = append(dst, '-')
		dst = appendInt(dst, int64(u/32%16), 2)
		dst = append(dst, '-')
		return appendInt(dst, int64(u%32), 2), 0, nil
	case kTime:
		u := uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16
		if u == 0 {
			return append(dst, "00:00:00"...), 0, nil
		}
		return appendHMS(dst, int64(u/10000), int64(u%10000/100), int64(u%100)), 0, nil
	case kTime2:
		return appendTime2(dst, v, c.dec), 0, nil
	case kDatetime:
		u := binary.LittleEndian.Uint64(v)
		if u == 0 {
			return append(dst, "0000-00-00 00:00:00"...), 0, nil
		}
		day, t := u/1000000, u%1000000
		dst = appendInt(dst, int64(day/10000), 4)
		dst = append(dst, '-')
		dst = appendInt(dst, int64(day%10000)/100, 2)
		dst = append(dst, '-')
		dst = appendInt(dst, int64(day%100), 2)
		dst = append(dst, ' ')
		return appendHMS(dst, int64(t/10000), int64(t%10000)/100, int64(t%100)), 0, nil
	case kDatetime2:
		return appendDatetime2(dst, v, c.dec), 0, nil
	case kTimestamp:
		sec := binary.LittleEndian.Uint32(v)
		if sec == 0 {
			return append(dst, "0000-00-00 00:00:00"...), 0, nil
		}
		return time.Unix(int64(sec), 0).UTC().AppendFormat(dst, fracLayouts[0]), 0, nil
	case kTimestamp2:
		sec := int64(binary.BigEndian.Uint32(v))
		usec := fracOf(v[4:], c.dec)
		if sec == 0 {
			return appendZeroTime(dst, usec, c.dec), 0, nil
		}
		return time.Unix(sec, usec*1000).UTC().AppendFormat(dst, fracLayouts[c.dec]), 0, nil
	case kString:
		s := v[c.size:]
		if d.typ == mysql.MYSQL_TYPE_STRING && d.binary && len(s) < d.padLen {
			// The binlog drops BINARY(n)'s trailing 0x00 bytes.
			dst = append(dst, s...)
			for range d.padLen - len(s) {
				dst = append(dst, 0)
			}
			return dst, rawText, nil
		}
		return append(dst, s...), 0, nil
	case kBlob:
		return append(dst, v[c.size:]...), 0, nil
	}
	return dst, 0, fmt.Errorf("cannot decode %s column", d.typeName())
}

// charsetDecoded reports whether a column's text goes through its
// character set's decoder (colDef.text) on its way out, as it did in
// colDef.convert.
func (c *colCodec) charsetDecoded() bool {
	if c.def.decode == nil {
		return false
	}
	switch c.kind {
	case kString, kBlob, kDecimal, kDate, kDatetime, kDatetime2, kTimestamp, kTimestamp2:
		return true
	}
	return false
}

// rawText notes a value whose text is not charset-decoded (a padded
// BINARY(n), as colDef.convert returns it).
const rawText = -1

var fracLayouts = [7]string{
	"2006-01-02 15:04:05",
	"2006-01-02 15:04:05.0",
	"2006-01-02 15:04:05.00",
	"2006-01-02 15:04:05.000",
	"2006-01-02 15:04:05.0000",
	"2006-01-02 15:04:05.00000",
	"2006-01-02 15:04:05.000000",
}

// fracOf reads the fractional seconds of a TIMESTAMP2 or DATETIME2 as
// microseconds (as go-mysql does: not checked against 999999).
func fracOf(b []byte, dec int) int64 {
	switch dec {
	case 1, 2:
		return int64(b[0]) * 10000
	case 3, 4:
		return int64(binary.BigEndian.Uint16(b)) * 100
	case 5, 6:
		return int64(b[0])<<16 | int64(b[1])<<8 | int64(b[2])
	}
	return 0
}

// appendInt appends v as fmt's %0*d does.
func appendInt(dst []byte, v int64, width int) []byte {
	u := uint64(v)
	if v < 0 {
		dst = append(dst, '-')
		u = uint64(-v)
		width--
	}
	var tmp [20]byte
	s := strconv.AppendUint(tmp[:0], u, 10)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

func appendHMS(dst []byte, h, m, s int64) []byte {
	dst = appendInt(dst, h, 2)
	dst = append(dst, ':')
	dst = appendInt(dst, m, 2)
	dst = append(dst, ':')
	return appendInt(dst, s, 2)
}

// appendFrac appends "." and the microseconds, then drops the digits past
// dec, as go-mysql formats a fraction (%06d, then cut 6-dec characters).
func appendFrac(dst []byte, usec int64, dec int) []byte {
	dst = append(dst, '.')
	dst = appendInt(dst, usec, 6)
	return dst[:len(dst)-(6-dec)]
}

func appendZeroTime(dst []byte, usec int64, dec int) []byte {
	dst = append(dst, "0000-00-00 00:00:00"...)
	if dec == 0 {
		return dst
	}
	return appendFrac(dst, usec, dec)
}

// appendDatetime2 follows go-mysql's decodeDatetime2 (with ParseTime
// off, as the reader runs it).
func appendDatetime2(dst, v []byte, dec int) []byte {
	intPart := int64(beUint(v[:5])) - 0x8000000000
	frac := fracOf(v[5:], dec)
	if intPart == 0 {
		return appendZeroTime(dst, frac, dec)
	}
	tmp := intPart<<24 + frac
	if tmp < 0 {
		tmp = -tmp
	}
	ymdhms := tmp >> 24
	ymd, hms := ymdhms>>17, ymdhms%(1<<17)
	ym := ymd >> 5
	dst = appendInt(dst, ym/13, 4)
	dst = append(dst, '-')
	dst = appendInt(dst, ym%13, 2)
	dst = append(dst, '-')
	dst = appendInt(dst, ymd%(1<<5), 2)
	dst = append(dst, ' ')
	dst = appendHMS(dst, hms>>12, (hms>>6)%(1<<6), hms%(1<<6))
	if dec == 0 {
		return dst
	}
	return appendFrac(dst, frac, dec)
}

// appendTime2 follows go-mysql's decodeTime2 and then colDef.convert's
// rule for a TIME(fsp) whose fraction is zero (go-mysql leaves it out;
// MySQL prints all fsp digits).
func appendTime2(dst, v []byte, dec int) []byte {
	var tmp, intPart, frac int64
	switch dec {
	case 1, 2:
		intPart = int64(beUint(v[:3])) - 0x800000
		frac = int64(v[3])
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x100
		}
		tmp = intPart<<24 + frac*10000
	case 3, 4:
		intPart = int64(beUint(v[:3])) - 0x800000
		frac = int64(binary.BigEndian.Uint16(v[3:5]))
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x10000
		}
		tmp = intPart<<24 + frac*100
	case 5, 6:
		tmp = int64(beUint(v[:6])) - 0x800000000000
		intPart = 1 // not the zero shortcut below
	default:
		intPart = int64(beUint(v[:3])) - 0x800000
		tmp = intPart << 24
	}
	start := len(dst)
	if intPart == 0 && frac == 0 {
		dst = append(dst, "00:00:00"...)
	} else {
		if tmp < 0 {
			tmp = -tmp
			dst = append(dst, '-')
		}
		hms := tmp >> 24
		dst = appendHMS(dst, (hms>>12)%(1<<10), (hms>>6)%(1<<6), hms%(1<<6))
		if sec := tmp % (1 << 24); sec != 0 {
			dst = appendFrac(dst, sec, dec)
		}
	}
	if dec > 0 && !containsByte(dst[start:], '.') {
		dst = append(dst, '.')
		for range dec {
			dst = append(dst, '0')
		}
	}
	return dst
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

func beUint(b []byte) uint64 {
	var u uint64
	for _, x := range b {
		u = u<<8 | uint64(x)
	}
	return u
}

var errDecimalWord = errors.New("decimal word out of range")

// appendDecimal renders a binary DECIMAL as go-mysql's decodeDecimal
// does (its errors included: a 9-digit word holding more than 9 digits).
func appendDecimal(dst, v []byte, prec, scale int) ([]byte, int64, error) {
	integral := prec - scale
	uncompIntegral, uncompFractional := integral/9, scale/9
	compIntegral, compFractional := integral-uncompIntegral*9, scale-uncompFractional*9
	var buf [40]byte
	d := buf[:copy(buf[:], v)]
	var mask uint32
	if d[0]&0x80 == 0 {
		mask = math.MaxUint32
		dst = append(dst, '-')
	}
	d[0] ^= 0x80
	word := func(b []byte, n int) uint32 {
		var x uint32
		for i := range n {
			x = x<<8 | uint32(b[i]^uint8(mask))
		}
		return x
	}
	zeroLeading := true
	pos := decimalBytes[compIntegral]
	if x := word(d, pos); x != 0 {
		zeroLeading = false
		dst = strconv.AppendUint(dst, uint64(x), 10)
	}
	for range uncompIntegral {
		x := binary.BigEndian.Uint32(d[pos:]) ^ mask
		pos += 4
		if zeroLeading {
			if x != 0 {
				zeroLeading = false
				dst = strconv.AppendUint(dst, uint64(x), 10)
			}
			continue
		}
		if x > 999999999 {
			return dst, 0, errDecimalWord
		}
		dst = appendInt(dst, int64(x), 9)
	}
	if zeroLeading {
		dst = append(dst, '0')
	}
	if pos < len(d) {
		dst = append(dst, '.')
		for range uncompFractional {
			x := binary.BigEndian.Uint32(d[pos:]) ^ mask
			pos += 4
			if x > 999999999 {
				return dst, 0, errDecimalWord
			}
			dst = appendInt(dst, int64(x), 9)
		}
		if n := decimalBytes[compFractional]; n > 0 {
			dst = appendInt(dst, int64(word(d[pos:], n)), compFractional)
		}
	}
	return dst, 0, nil
}

// image hands out the values of decoded image img into row (len(cols)
// long), as convertRow gave them: NULL, the text (charset-decoded), or
// convertRow's error. keep is the kept text as one string: the event's
// values share one allocation. Dropped values (before-image columns
// outside the key) are checked and left zero.
func (d *rowsDecoder) image(tm *tableMap, cols []colCodec, keep string, img int, row sluice.Row) error {
	base := img * len(cols)
	for i := range cols {
		sp := d.spans[base+i]
		c := &cols[i]
		switch sp.flag {
		case spanNull:
			row[i] = sluice.Null
		case spanRaw:
			row[i] = sluice.Text(keep[sp.start:sp.end])
		case spanBadEnum:
			return fmt.Errorf("binlog: table %s column %s: enum index %d out of range (%d labels)", tm.name, c.def.name, sp.start, len(c.def.labels))
		case spanDropped:
			row[i] = sluice.Value{}
			if !c.charsetDecoded() || decodesClean(c.def.charset, d.dropped[sp.start:sp.end]) {
				continue
			}
			if !d.droppedDone {
				// Only to check the text: one string for the buffer.
				d.droppedStr, d.droppedDone = string(d.dropped), true
			}
			if _, err := c.def.text(d.droppedStr[sp.start:sp.end]); err != nil {
				return fmt.Errorf("binlog: table %s column %s: %w", tm.name, c.def.name, err)
			}
		default:
			s := keep[sp.start:sp.end]
			if !c.charsetDecoded() {
				row[i] = sluice.Text(s)
				continue
			}
			v, err := c.def.text(s)
			if err != nil {
				return fmt.Errorf("binlog: table %s column %s: %w", tm.name, c.def.name, err)
			}
			row[i] = v
		}
	}
	return nil
}

// decodesClean reports, without making a string of them, that bytes of
// the character set decode without an error (the decoders of charsets:
// validUTF8 fails only on invalid UTF-8, decodeLatin1 never). false
// means: ask the decoder.
func decodesClean(charset string, b []byte) bool {
	switch charset {
	case "utf8mb4", "utf8mb3", "utf8":
		return utf8.Valid(b)
	case "latin1":
		return true
	}
	return false
}
