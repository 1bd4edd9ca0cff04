package binlog

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source"
)

// testCol is a column of a hand-encoded table map.
type testCol struct {
	name     string
	typ      byte
	meta     uint16
	unsigned bool
	nullable bool
	coll     uint64   // character, ENUM and SET columns
	labels   []string // ENUM and SET
}

// testColls are the collation ids the tests' table maps use.
var testColls = map[uint64]collation{
	8:  {name: "latin1_swedish_ci", charset: "latin1"},
	11: {name: "ascii_general_ci", charset: "ascii"},
	33: {name: "utf8mb3_general_ci", charset: "utf8mb3"},
	45: {name: "utf8mb4_general_ci", charset: "utf8mb4"},
	63: {name: "binary", charset: "binary"},
}

func (c testCol) realType() byte {
	if c.typ == mysql.MYSQL_TYPE_STRING {
		if b0 := byte(c.meta >> 8); b0 == mysql.MYSQL_TYPE_ENUM || b0 == mysql.MYSQL_TYPE_SET {
			return b0
		}
	}
	return c.typ
}

func (c testCol) numeric() bool {
	switch c.realType() {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG,
		mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_YEAR:
		return true
	}
	return false
}

func (c testCol) character(mariadb bool) bool {
	switch c.realType() {
	case mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB:
		return true
	case mysql.MYSQL_TYPE_GEOMETRY:
		return mariadb
	}
	return false
}

func lenenc(b []byte, n int) []byte { return mysql.AppendLengthEncodedInteger(b, uint64(n)) }

func tlv(b []byte, t byte, v []byte) []byte {
	b = append(b, t)
	b = lenenc(b, len(v))
	return append(b, v...)
}

// eventBytes frames an event body with a header (no checksum); the
// slice's capacity ends with it, as go-mysql could otherwise read past
// the end of a value into spare capacity.
func eventBytes(typ replication.EventType, body []byte) []byte {
	b := make([]byte, 19, 19+len(body))
	b[4] = byte(typ)
	binary.LittleEndian.PutUint32(b[9:], uint32(19+len(body)))
	binary.LittleEndian.PutUint32(b[13:], 1000)
	return slices.Clip(append(b, body...))
}

func fdeEvent() []byte {
	body := binary.LittleEndian.AppendUint16(nil, 4)
	ver := make([]byte, 50)
	copy(ver, "5.0.99-test") // too old for a checksum: none is framed
	body = append(body, ver...)
	body = append(body, 0, 0, 0, 0, 19)
	for range 255 {
		body = append(body, 8)
	}
	return eventBytes(replication.FORMAT_DESCRIPTION_EVENT, body)
}

func tableMapEvent(cols []testCol, mariadb bool) []byte {
	b := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	b = append(b, 2, 'd', 'b', 0, 1, 't', 0)
	b = lenenc(b, len(cols))
	var meta, nulls, signed, names, charsets, enums, sets, esCharsets []byte
	nulls = make([]byte, (len(cols)+7)/8)
	nNumeric := 0
	for i, c := range cols {
		b = append(b, c.typ)
		switch c.typ {
		case mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_NEWDECIMAL:
			meta = append(meta, byte(c.meta>>8), byte(c.meta))
		case mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BIT:
			meta = binary.LittleEndian.AppendUint16(meta, c.meta)
		case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_GEOMETRY,
			mysql.MYSQL_TYPE_VECTOR, mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_TIME2, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIMESTAMP2:
			meta = append(meta, byte(c.meta))
		}
		if c.nullable {
			nulls[i/8] |= 1 << (i % 8)
		}
		if c.numeric() {
			if nNumeric%8 == 0 {
				signed = append(signed, 0)
			}
			if c.unsigned {
				signed[len(signed)-1] |= 0x80 >> (nNumeric % 8)
			}
			nNumeric++
		}
		names = append(names, byte(len(c.name)))
		names = append(names, c.name...)
		switch rt := c.realType(); {
		case rt == mysql.MYSQL_TYPE_ENUM || rt == mysql.MYSQL_TYPE_SET:
			l := lenenc(nil, len(c.labels))
			for _, s := range c.labels {
				l = lenenc(l, len(s))
				l = append(l, s...)
			}
			if rt == mysql.MYSQL_TYPE_ENUM {
				enums = append(enums, l...)
			} else {
				sets = append(sets, l...)
			}
			esCharsets = lenenc(esCharsets, int(c.coll))
		case c.character(mariadb):
			charsets = lenenc(charsets, int(c.coll))
		}
	}
	b = lenenc(b, len(meta))
	b = append(b, meta...)
	b = append(b, nulls...)
	b = tlv(b, replication.TABLE_MAP_OPT_META_SIGNEDNESS, signed)
	if len(charsets) > 0 {
		b = tlv(b, replication.TABLE_MAP_OPT_META_COLUMN_CHARSET, charsets)
	}
	b = tlv(b, replication.TABLE_MAP_OPT_META_COLUMN_NAME, names)
	if len(sets) > 0 {
		b = tlv(b, replication.TABLE_MAP_OPT_META_SET_STR_VALUE, sets)
	}
	if len(enums) > 0 {
		b = tlv(b, replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enums)
	}
	if len(esCharsets) > 0 {
		b = tlv(b, replication.TABLE_MAP_OPT_META_ENUM_AND_SET_COLUMN_CHARSET, esCharsets)
	}
	b = tlv(b, replication.TABLE_MAP_OPT_META_SIMPLE_PRIMARY_KEY, []byte{0})
	return eventBytes(replication.TABLE_MAP_EVENT, b)
}

// rowsEvent frames row images as a rows event of the given type (v2,
// or a MariaDB compressed v1 one, whose rows it compresses).
func rowsEvent(typ replication.EventType, ncols int, rows []byte, flags uint16) []byte {
	return rowsEventBitmap(typ, ncols, rows, flags, bytes.Repeat([]byte{0xff}, (ncols+7)/8))
}

// rowsEventBitmap is rowsEvent with the column bitmap given.
func rowsEventBitmap(typ replication.EventType, ncols int, rows []byte, flags uint16, bm []byte) []byte {
	b := []byte{1, 0, 0, 0, 0, 0}
	b = binary.LittleEndian.AppendUint16(b, flags)
	compressed := typ >= replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1 && typ <= replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1
	if !compressed {
		b = append(b, 2, 0)
	}
	b = lenenc(b, ncols)
	b = append(b, bm...)
	if typ == replication.UPDATE_ROWS_EVENTv2 || typ == replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1 {
		b = append(b, bm...)
	}
	if compressed {
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		w.Write(rows)
		w.Close()
		b = append(b, 0x84)
		b = binary.BigEndian.AppendUint32(b, uint32(len(rows)))
		b = append(b, z.Bytes()...)
	} else {
		b = append(b, rows...)
	}
	return eventBytes(typ, b)
}

// parsed is a table map and a rows event parsed by go-mysql, with and
// without its own row decoding.
type parsed struct {
	tm       *replication.TableMapEvent
	old      *replication.RowsEvent // go-mysql decoded the rows
	oldErr   error
	raw      *replication.RowsEvent // keepRawRows kept them
	defs     []colDef
	header   *replication.EventHeader
	rawRows  rawRows
	rowsType replication.EventType
}

func newParser(native, mariadb bool) *replication.BinlogParser {
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MySQLFlavor)
	if mariadb {
		p.SetFlavor(mysql.MariaDBFlavor)
	}
	p.SetTimestampStringLocation(time.UTC)
	p.SetRenderJSONAsMySQLText(true)
	if native {
		p.SetRowsEventDecodeFunc(keepRawRows)
	}
	return p
}

// parse parses the events both ways; ok is false when the table map is
// refused (by go-mysql or colDefs).
func parse(t testing.TB, cols []testCol, mariadb bool, typ replication.EventType, rows []byte) (parsed, bool) {
	var p parsed
	fde, tmEv, rowsEv := fdeEvent(), tableMapEvent(cols, mariadb), rowsEvent(typ, len(cols), rows, 0)
	for _, native := range []bool{false, true} {
		ps := newParser(native, mariadb)
		if _, err := ps.Parse(fde); err != nil {
			t.Fatalf("format description: %v", err)
		}
		ev, err := ps.Parse(slices.Clone(tmEv))
		if err != nil {
			return p, false
		}
		p.tm = ev.Event.(*replication.TableMapEvent)
		ev, err = ps.Parse(slices.Clip(slices.Clone(rowsEv)))
		if native {
			if err != nil {
				t.Fatalf("rows event header: %v", err)
			}
			p.raw, p.header = ev.Event.(*replication.RowsEvent), ev.Header
			var ok bool
			if p.rawRows, ok = rawRowsOf(p.raw); !ok {
				t.Fatal("keepRawRows left no raw rows")
			}
		} else if err != nil {
			p.oldErr = err
		} else {
			p.old = ev.Event.(*replication.RowsEvent)
		}
	}
	var err error
	if p.defs, err = colDefs(p.tm, mariadb, testColls); err != nil {
		return p, false
	}
	p.rowsType = typ
	return p, true
}

// oldImages converts go-mysql's decoding of every image with convertRow.
func (p parsed) oldImages() ([]sluice.Row, error) {
	if p.oldErr != nil {
		return nil, p.oldErr
	}
	tm := &tableMap{name: "db.t", defs: p.defs}
	var out []sluice.Row
	for _, r := range p.old.Rows {
		row, err := (&state{}).convertRow(tm, r)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// nativeImages decodes every image with the native decoder, all columns
// kept. ok is false when the native decoder leaves the table to go-mysql.
func (p parsed) nativeImages() (rows []sluice.Row, ok bool, err error) {
	return p.nativeImagesKeyed(false)
}

// nativeImagesKeyed is nativeImages; keyed decodes the before images of
// updates and deletes as state.rows does, keeping the first column (the
// key) alone.
func (p parsed) nativeImagesKeyed(keyed bool) (rows []sluice.Row, ok bool, err error) {
	codecs := rowCodecs(p.defs)
	if codecs == nil {
		return nil, false, nil
	}
	data := []byte(p.rawRows)
	if p.rowsType >= replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1 && p.rowsType <= replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1 {
		if data, err = decompressRows(data); err != nil {
			return nil, true, err
		}
	}
	update := p.rowsType == replication.UPDATE_ROWS_EVENTv2 || p.rowsType == replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1
	before := keyed && p.hasBefore()
	isKey := make([]bool, len(codecs))
	isKey[0] = true
	var d rowsDecoder
	if err := d.decode(data, codecs, update, before, isKey); err != nil {
		return nil, true, err
	}
	tm := &tableMap{name: "db.t", defs: p.defs, codecs: codecs}
	keep := string(d.keep)
	for i := range d.images {
		row := make(sluice.Row, len(codecs))
		if err := d.image(tm, codecs, keep, i, row); err != nil {
			return nil, true, err
		}
		rows = append(rows, row)
	}
	return rows, true, nil
}

// hasBefore reports whether the event's images start with a before image.
func (p parsed) hasBefore() bool {
	switch p.rowsType {
	case replication.WRITE_ROWS_EVENTv2, replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return false
	}
	return true
}

// isBefore reports whether image i of the event is a before image.
func (p parsed) isBefore(i int) bool {
	switch p.rowsType {
	case replication.UPDATE_ROWS_EVENTv2, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		return i%2 == 0
	}
	return p.hasBefore()
}

// compareImages checks the native decoder against go-mysql's decoding
// and convertRow, and the row count of a walk against go-mysql's.
func compareImages(t *testing.T, p parsed) {
	t.Helper()
	want, wantErr := p.oldImages()
	got, ok, gotErr := p.nativeImages()
	if ok {
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("go-mysql error %v, native error %v\nwant %v\ngot  %v", wantErr, gotErr, want, got)
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("rows differ\nwant %q\ngot  %q", want, got)
		}
	}
	// As state.rows decodes before images: the key kept, the rest checked.
	keyed, _, keyedErr := p.nativeImagesKeyed(true)
	if ok {
		if (wantErr == nil) != (keyedErr == nil) {
			t.Fatalf("go-mysql error %v, native error with before images keyed %v", wantErr, keyedErr)
		}
		for i := range keyed {
			w, g := want[i], keyed[i]
			if p.isBefore(i) {
				w, g = w[:1], g[:1]
			}
			if !reflect.DeepEqual(w, g) {
				t.Fatalf("image %d differs with before images keyed\nwant %q\ngot  %q", i, w, g)
			}
		}
	}
	if p.oldErr != nil {
		return
	}
	if cols, ok := walkCodecs(p.tm); ok {
		data := []byte(p.rawRows)
		var err error
		if p.rowsType >= replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1 && p.rowsType <= replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1 {
			if data, err = decompressRows(data); err != nil {
				t.Fatalf("decompress: %v", err)
			}
		}
		var bm2 []byte
		if p.rowsType == replication.UPDATE_ROWS_EVENTv2 || p.rowsType == replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1 {
			bm2 = p.raw.ColumnBitmap2
		}
		n, err := countImages(data, cols, p.raw.ColumnBitmap1, bm2)
		if err != nil || n != len(p.old.Rows) {
			t.Fatalf("walk counts %d images (%v), go-mysql decoded %d", n, err, len(p.old.Rows))
		}
	}
}

// Value encoders, in the binlog's layouts.

func le(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := range n {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

func be(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := range n {
		b[n-1-i] = byte(v >> (8 * i))
	}
	return b
}

func str(prefix int, s string) []byte { return append(le(uint64(len(s)), prefix), s...) }

func f32(f float32) []byte { return le(uint64(math.Float32bits(f)), 4) }
func f64(f float64) []byte { return le(math.Float64bits(f), 8) }

func encDecimal(s string, prec, scale int) []byte {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	ip, fp, _ := strings.Cut(s, ".")
	integral := prec - scale
	ip = strings.Repeat("0", integral-len(ip)) + ip
	fp += strings.Repeat("0", scale-len(fp))
	var b []byte
	put := func(digits string, n int) {
		v, _ := strconv.ParseUint(digits, 10, 32)
		b = append(b, be(v, n)...)
	}
	lead := integral % 9
	if lead > 0 {
		put(ip[:lead], decimalBytes[lead])
	}
	for i := lead; i < integral; i += 9 {
		put(ip[i:i+9], 4)
	}
	for i := 0; i+9 <= scale; i += 9 {
		put(fp[i:i+9], 4)
	}
	if r := scale % 9; r > 0 {
		put(fp[scale-r:], decimalBytes[r])
	}
	if neg {
		for i := range b {
			b[i] = ^b[i]
		}
	}
	b[0] ^= 0x80
	return b
}

func encDate(y, m, d int) []byte { return le(uint64(y*512+m*32+d), 3) }

func fracBytes(usec int64, dec int) []byte {
	switch dec {
	case 1, 2:
		return []byte{byte(usec / 10000)}
	case 3, 4:
		return be(uint64(usec/100), 2)
	case 5, 6:
		return be(uint64(usec), 3)
	}
	return nil
}

// encTime2 packs a TIME(dec) as MySQL's my_time_packed_to_binary does.
func encTime2(neg bool, h, m, s int, usec int64, dec int) []byte {
	nr := (int64(h)<<12|int64(m)<<6|int64(s))<<24 + usec
	if neg {
		nr = -nr
	}
	switch dec {
	case 1, 2:
		return append(be(uint64(nr>>24+0x800000), 3), byte(int8((nr%(1<<24))/10000)))
	case 3, 4:
		return append(be(uint64(nr>>24+0x800000), 3), be(uint64(int16((nr%(1<<24))/100)), 2)...)
	case 5, 6:
		return be(uint64(nr+0x800000000000), 6)
	}
	return be(uint64(nr>>24+0x800000), 3)
}

func encDatetime2(y, mo, d, h, mi, s int, usec int64, dec int) []byte {
	ymd := int64((y*13+mo)<<5 | d)
	hms := int64(h<<12 | mi<<6 | s)
	return append(be(uint64(ymd<<17|hms+0x8000000000), 5), fracBytes(usec, dec)...)
}

func encTimestamp2(sec uint32, usec int64, dec int) []byte {
	return append(be(uint64(sec), 4), fracBytes(usec, dec)...)
}

// image is a row image: nil values are NULL.
func image(vals ...[]byte) []byte {
	nulls := make([]byte, (len(vals)+7)/8)
	var b []byte
	for i, v := range vals {
		if v == nil {
			nulls[i/8] |= 1 << (i % 8)
			continue
		}
		b = append(b, v...)
	}
	return append(nulls, b...)
}

func enumMeta(n int) uint16 { return uint16(mysql.MYSQL_TYPE_ENUM)<<8 | uint16(n) }
func setMeta(n int) uint16  { return uint16(mysql.MYSQL_TYPE_SET)<<8 | uint16(n) }

// charMeta is a CHAR(n bytes)'s metadata as MySQL writes it.
func charMeta(n int) uint16 {
	return uint16(mysql.MYSQL_TYPE_STRING^byte((n>>4)&0x30))<<8 | uint16(n&0xff)
}

// edgeCase is one column type with rows of edge values.
type edgeCase struct {
	name string
	col  testCol
	vals [][]byte // one value per row; nil is NULL
	want []string // the text of each (NULL for NULL)
}

func edgeCases() []edgeCase {
	i := func(typ byte, unsigned bool) testCol {
		return testCol{typ: typ, unsigned: unsigned, nullable: true}
	}
	labels := make([]string, 64)
	for j := range labels {
		labels[j] = fmt.Sprintf("m%d", j)
	}
	return []edgeCase{
		{"tinyint", i(mysql.MYSQL_TYPE_TINY, false), [][]byte{{0x80}, {0x7f}, {0}, nil}, []string{"-128", "127", "0", "NULL"}},
		{"tinyint unsigned", i(mysql.MYSQL_TYPE_TINY, true), [][]byte{{0xff}, {0}}, []string{"255", "0"}},
		{"smallint", i(mysql.MYSQL_TYPE_SHORT, false), [][]byte{le(0x8000, 2), le(0x7fff, 2)}, []string{"-32768", "32767"}},
		{"smallint unsigned", i(mysql.MYSQL_TYPE_SHORT, true), [][]byte{le(0xffff, 2)}, []string{"65535"}},
		{"mediumint", i(mysql.MYSQL_TYPE_INT24, false), [][]byte{le(0x800000, 3), le(0x7fffff, 3), le(0xffffff, 3)}, []string{"-8388608", "8388607", "-1"}},
		{"mediumint unsigned", i(mysql.MYSQL_TYPE_INT24, true), [][]byte{le(0xffffff, 3)}, []string{"16777215"}},
		{"int", i(mysql.MYSQL_TYPE_LONG, false), [][]byte{le(0x80000000, 4), le(0x7fffffff, 4)}, []string{"-2147483648", "2147483647"}},
		{"int unsigned", i(mysql.MYSQL_TYPE_LONG, true), [][]byte{le(0xffffffff, 4)}, []string{"4294967295"}},
		{"bigint", i(mysql.MYSQL_TYPE_LONGLONG, false), [][]byte{le(1<<63, 8), le(1<<63-1, 8)}, []string{"-9223372036854775808", "9223372036854775807"}},
		{"bigint unsigned", i(mysql.MYSQL_TYPE_LONGLONG, true), [][]byte{le(math.MaxUint64, 8)}, []string{"18446744073709551615"}},
		{"float", testCol{typ: mysql.MYSQL_TYPE_FLOAT, meta: 4}, [][]byte{f32(16777216), f32(-1.5), f32(0.1)}, []string{"1.6777216e+07", "-1.5", "0.1"}},
		{"double", testCol{typ: mysql.MYSQL_TYPE_DOUBLE, meta: 8}, [][]byte{f64(0.5), f64(-2.25), f64(0), f64(12345.125)}, []string{"0.5", "-2.25", "0", "12345.125"}},
		{"decimal(10,2)", testCol{typ: mysql.MYSQL_TYPE_NEWDECIMAL, meta: 10<<8 | 2}, [][]byte{encDecimal("12345678.90", 10, 2), encDecimal("-0.05", 10, 2), encDecimal("0", 10, 2), encDecimal("-12345678.99", 10, 2)},
			[]string{"12345678.90", "-0.05", "0.00", "-12345678.99"}},
		{"decimal(65,30)", testCol{typ: mysql.MYSQL_TYPE_NEWDECIMAL, meta: 65<<8 | 30}, [][]byte{encDecimal("-99999999999999999999999999999999999.999999999999999999999999999999", 65, 30), encDecimal("1000000000.000000001", 65, 30)},
			[]string{"-99999999999999999999999999999999999.999999999999999999999999999999", "1000000000.000000001000000000000000000000"}},
		{"decimal(5,0)", testCol{typ: mysql.MYSQL_TYPE_NEWDECIMAL, meta: 5 << 8}, [][]byte{encDecimal("-99999", 5, 0), encDecimal("0", 5, 0)}, []string{"-99999", "0"}},
		{"bit(1)", testCol{typ: mysql.MYSQL_TYPE_BIT, meta: 1}, [][]byte{{1}, {0}}, []string{"\x01", "\x00"}},
		{"bit(64)", testCol{typ: mysql.MYSQL_TYPE_BIT, meta: 8 << 8}, [][]byte{be(math.MaxUint64, 8)}, []string{strings.Repeat("\xff", 8)}},
		{"bit(10)", testCol{typ: mysql.MYSQL_TYPE_BIT, meta: 1<<8 | 2}, [][]byte{{0x03, 0xff}}, []string{"\x03\xff"}},
		{"year", testCol{typ: mysql.MYSQL_TYPE_YEAR}, [][]byte{{0}, {1}, {255}, {124}}, []string{"0000", "1901", "2155", "2024"}},
		{"enum", testCol{typ: mysql.MYSQL_TYPE_STRING, meta: enumMeta(1), coll: 45, labels: []string{"a", "b", "c"}}, [][]byte{{0}, {1}, {3}}, []string{"", "a", "c"}},
		{"enum latin1", testCol{typ: mysql.MYSQL_TYPE_STRING, meta: enumMeta(2), coll: 8, labels: []string{"caf\xe9"}}, [][]byte{le(1, 2)}, []string{"café"}},
		{"set", testCol{typ: mysql.MYSQL_TYPE_STRING, meta: setMeta(8), coll: 45, labels: labels}, [][]byte{le(0, 8), le(1<<63|5, 8), le(math.MaxUint64, 8)},
			[]string{"", "m0,m2,m63", strings.Join(labels, ",")}},
		{"date", testCol{typ: mysql.MYSQL_TYPE_DATE}, [][]byte{encDate(0, 0, 0), encDate(2024, 2, 29), encDate(1000, 1, 1), encDate(9999, 12, 31), encDate(2024, 0, 0)},
			[]string{"0000-00-00", "2024-02-29", "1000-01-01", "9999-12-31", "2024-00-00"}},
		{"time (old)", testCol{typ: mysql.MYSQL_TYPE_TIME}, [][]byte{le(0, 3), le(235959, 3), le(8385959, 3)}, []string{"00:00:00", "23:59:59", "838:59:59"}},
		{"datetime (old)", testCol{typ: mysql.MYSQL_TYPE_DATETIME}, [][]byte{le(0, 8), le(20240229235959, 8)}, []string{"0000-00-00 00:00:00", "2024-02-29 23:59:59"}},
		{"timestamp (old)", testCol{typ: mysql.MYSQL_TYPE_TIMESTAMP}, [][]byte{le(0, 4), le(1700000000, 4), le(math.MaxInt32, 4)}, []string{"0000-00-00 00:00:00", "2023-11-14 22:13:20", "2038-01-19 03:14:07"}},
		{"varchar", testCol{typ: mysql.MYSQL_TYPE_VARCHAR, meta: 480, coll: 45, nullable: true}, [][]byte{str(2, ""), str(2, "héllo"), nil}, []string{"", "héllo", "NULL"}},
		{"varchar latin1", testCol{typ: mysql.MYSQL_TYPE_VARCHAR, meta: 20, coll: 8}, [][]byte{str(1, "caf\xe9 \x80\x81")}, []string{"café €\u0081"}},
		{"varchar ascii", testCol{typ: mysql.MYSQL_TYPE_VARCHAR, meta: 20, coll: 11}, [][]byte{str(1, "plain")}, []string{"plain"}},
		{"varbinary", testCol{typ: mysql.MYSQL_TYPE_VARCHAR, meta: 300, coll: 63}, [][]byte{str(2, "\x00\xff")}, []string{"\x00\xff"}},
		{"char", testCol{typ: mysql.MYSQL_TYPE_STRING, meta: charMeta(40), coll: 45}, [][]byte{str(1, "ab"), str(1, "")}, []string{"ab", ""}},
		{"char(255) utf8mb4", testCol{typ: mysql.MYSQL_TYPE_STRING, meta: charMeta(1020), coll: 45}, [][]byte{str(2, "x")}, []string{"x"}},
		{"binary(4)", testCol{typ: mysql.MYSQL_TYPE_STRING, meta: charMeta(4), coll: 63}, [][]byte{str(1, "a"), str(1, ""), str(1, "abcd")}, []string{"a\x00\x00\x00", "\x00\x00\x00\x00", "abcd"}},
		{"blob", testCol{typ: mysql.MYSQL_TYPE_BLOB, meta: 2, coll: 63}, [][]byte{str(2, ""), str(2, "\x00bin")}, []string{"", "\x00bin"}},
		{"tinytext", testCol{typ: mysql.MYSQL_TYPE_BLOB, meta: 1, coll: 45}, [][]byte{str(1, "t")}, []string{"t"}},
		{"mediumtext latin1", testCol{typ: mysql.MYSQL_TYPE_BLOB, meta: 3, coll: 8}, [][]byte{str(3, "\xff")}, []string{"ÿ"}},
		{"longblob", testCol{typ: mysql.MYSQL_TYPE_BLOB, meta: 4, coll: 63}, [][]byte{str(4, "big")}, []string{"big"}},
		{"geometry", testCol{typ: mysql.MYSQL_TYPE_GEOMETRY, meta: 4, coll: 63}, [][]byte{str(4, "\x00\x00\x00\x00\x01\x01\x00\x00\x00")}, []string{"\x00\x00\x00\x00\x01\x01\x00\x00\x00"}},
	}
}

// temporalCases are the fractional-second types at every fsp.
func temporalCases() []edgeCase {
	var out []edgeCase
	for dec := 0; dec <= 6; dec++ {
		frac := func(s string) string {
			if dec == 0 {
				return ""
			}
			return "." + s[:dec]
		}
		usec := int64(123456)
		trunc := usec / int64(math.Pow10(6-dec)) * int64(math.Pow10(6-dec))
		out = append(out,
			edgeCase{fmt.Sprintf("time(%d)", dec), testCol{typ: mysql.MYSQL_TYPE_TIME2, meta: uint16(dec)},
				[][]byte{encTime2(false, 0, 0, 0, 0, dec), encTime2(false, 838, 59, 59, trunc, dec), encTime2(true, 838, 59, 59, trunc, dec), encTime2(true, 0, 0, 1, trunc, dec), encTime2(false, 12, 0, 0, 0, dec)},
				[]string{"00:00:00" + frac("000000"), "838:59:59" + frac("123456"), "-838:59:59" + frac("123456"), "-00:00:01" + frac("123456"), "12:00:00" + frac("000000")}},
			edgeCase{fmt.Sprintf("datetime(%d)", dec), testCol{typ: mysql.MYSQL_TYPE_DATETIME2, meta: uint16(dec)},
				[][]byte{encDatetime2(0, 0, 0, 0, 0, 0, 0, dec), encDatetime2(9999, 12, 31, 23, 59, 59, trunc, dec), encDatetime2(2024, 0, 0, 0, 0, 0, 0, dec), encDatetime2(1000, 1, 1, 0, 0, 0, 0, dec)},
				[]string{"0000-00-00 00:00:00" + frac("000000"), "9999-12-31 23:59:59" + frac("123456"), "2024-00-00 00:00:00" + frac("000000"), "1000-01-01 00:00:00" + frac("000000")}},
			edgeCase{fmt.Sprintf("timestamp(%d)", dec), testCol{typ: mysql.MYSQL_TYPE_TIMESTAMP2, meta: uint16(dec)},
				[][]byte{encTimestamp2(0, 0, dec), encTimestamp2(1, trunc, dec), encTimestamp2(math.MaxInt32, trunc, dec)},
				[]string{"0000-00-00 00:00:00" + frac("000000"), "1970-01-01 00:00:01" + frac("123456"), "2038-01-19 03:14:07" + frac("123456")}},
		)
	}
	return out
}

func TestRowsDecodeEdgeValues(t *testing.T) {
	for _, mariadb := range []bool{true, false} {
		for _, tc := range append(edgeCases(), temporalCases()...) {
			t.Run(fmt.Sprintf("%s/mariadb=%v", tc.name, mariadb), func(t *testing.T) {
				// The column between a key and a NULLable column, so that
				// the value is decoded at an offset and NULLs move it.
				cols := []testCol{{name: "id", typ: mysql.MYSQL_TYPE_LONG}, tc.col, {name: "n", typ: mysql.MYSQL_TYPE_TINY, nullable: true}}
				cols[1].name = "v"
				var rows []byte
				for j, v := range tc.vals {
					var n []byte
					if j%2 == 1 {
						n = []byte{7}
					}
					rows = append(rows, image(le(uint64(j), 4), v, n)...)
				}
				for _, typ := range []replication.EventType{replication.WRITE_ROWS_EVENTv2, replication.DELETE_ROWS_EVENTv2, replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1} {
					p, ok := parse(t, cols, mariadb, typ, rows)
					if !ok {
						t.Fatal("table map refused")
					}
					compareImages(t, p)
					got, native, err := p.nativeImages()
					if !native || err != nil {
						t.Fatalf("native decoding: %v (native %v)", err, native)
					}
					if len(got) != len(tc.want) {
						t.Fatalf("%d rows, want %d", len(got), len(tc.want))
					}
					for j, w := range tc.want {
						want := sluice.Text(w)
						if w == "NULL" {
							want = sluice.Null
						}
						if got[j][1] != want {
							t.Errorf("row %d: %+q, want %+q", j, got[j][1], want)
						}
					}
				}
			})
		}
	}
}

// fuzzTypes are the column types a fuzz input picks from; 0xf7 and 0xf8
// stand for a CHAR column's metadata naming ENUM and SET.
var fuzzTypes = []byte{
	mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG,
	mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_BIT, mysql.MYSQL_TYPE_YEAR,
	mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_TIME2, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2,
	mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING,
	mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_VECTOR,
	mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_NULL, mysql.MYSQL_TYPE_DECIMAL,
}

var fuzzColls = []uint64{45, 8, 63, 11, 33}

var fuzzEvents = []replication.EventType{
	replication.WRITE_ROWS_EVENTv2, replication.UPDATE_ROWS_EVENTv2, replication.DELETE_ROWS_EVENTv2,
	replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1,
}

// fuzzCols reads a fuzz input's columns: five bytes each (type, metadata
// high and low byte, attributes, labels).
func fuzzCols(spec []byte) []testCol {
	var cols []testCol
	for i := 0; i+5 <= len(spec) && len(cols) < 24; i += 5 {
		c := testCol{name: fmt.Sprintf("c%d", len(cols))}
		c.typ = fuzzTypes[int(spec[i])%len(fuzzTypes)]
		c.meta = uint16(spec[i+1])<<8 | uint16(spec[i+2])
		attr := spec[i+3]
		c.unsigned, c.nullable = attr&1 != 0, attr&2 != 0
		c.coll = fuzzColls[int(attr>>2)%len(fuzzColls)]
		if c.typ == mysql.MYSQL_TYPE_ENUM || c.typ == mysql.MYSQL_TYPE_SET {
			c.meta = uint16(c.typ)<<8 | c.meta&0xff
			c.typ = mysql.MYSQL_TYPE_STRING
			for j := range int(spec[i+4]) % 70 {
				l := fmt.Sprintf("l%d", j)
				if j%7 == 3 {
					l += "\xe9" // not UTF-8: refused unless latin1
				}
				c.labels = append(c.labels, l)
			}
		}
		cols = append(cols, c)
	}
	return cols
}

// fuzzSpec is the fuzz input that fuzzCols reads as cols.
func fuzzSpec(cols []testCol) []byte {
	var b []byte
	for _, c := range cols {
		typ, meta := c.typ, c.meta
		if rt := c.realType(); rt == mysql.MYSQL_TYPE_ENUM || rt == mysql.MYSQL_TYPE_SET {
			typ = rt
		}
		attr := byte(slices.Index(fuzzColls, c.coll)) << 2
		if c.coll == 0 {
			attr = 0
		}
		if c.unsigned {
			attr |= 1
		}
		if c.nullable {
			attr |= 2
		}
		b = append(b, byte(slices.Index(fuzzTypes, typ)), byte(meta>>8), byte(meta), attr, byte(len(c.labels)))
	}
	return b
}

// FuzzRowsDecode compares the native decoder with go-mysql's decoding
// followed by convertRow, on the same bytes: both fail, or both give the
// same rows. The row count of a walk must be go-mysql's too.
func FuzzRowsDecode(f *testing.F) {
	for _, tc := range append(edgeCases(), temporalCases()...) {
		cols := []testCol{{name: "id", typ: mysql.MYSQL_TYPE_LONG}, tc.col}
		var rows []byte
		for j, v := range tc.vals {
			rows = append(rows, image(le(uint64(j), 4), v)...)
		}
		if len(tc.vals)%2 == 1 {
			rows = append(rows, image(le(9, 4), tc.vals[0])...)
		}
		for mode := range 2 * len(fuzzEvents) {
			f.Add(fuzzSpec(cols), rows, byte(mode))
		}
	}
	f.Fuzz(func(t *testing.T, spec, rows []byte, mode byte) {
		cols := fuzzCols(spec)
		if len(cols) == 0 {
			return
		}
		mariadb := mode&1 != 0
		typ := fuzzEvents[int(mode>>1)%len(fuzzEvents)]
		p, ok := parse(t, cols, mariadb, typ, rows)
		if !ok {
			return
		}
		compareImages(t, p)
	})
}

// itemsCols is a sysbench-like table: items (id bigint primary key, k
// int, c varchar(120), pad varchar(60)), utf8mb4.
var itemsCols = []testCol{
	{name: "id", typ: mysql.MYSQL_TYPE_LONGLONG},
	{name: "k", typ: mysql.MYSQL_TYPE_LONG, nullable: true},
	{name: "c", typ: mysql.MYSQL_TYPE_VARCHAR, meta: 480, coll: 45, nullable: true},
	{name: "pad", typ: mysql.MYSQL_TYPE_VARCHAR, meta: 240, coll: 45, nullable: true},
}

func itemsImage(id int, k int) []byte {
	c := fmt.Sprintf("%011d-%011d-%011d-%011d-%011d-%011d-%011d-%011d-%011d-%011d", id, k, id*7, k*3, id, k, id, k, id, k)
	pad := fmt.Sprintf("%011d-%011d-%011d-%011d-%011d", k, id, k, id, k)
	return image(le(uint64(id), 8), le(uint64(k), 4), str(2, c), str(1, pad))
}

// itemsEvents are rows events of ten rows each.
func itemsEvents(mariadb bool) map[string][]byte {
	var ins, upd, del []byte
	for i := range 10 {
		ins = append(ins, itemsImage(i+1, i*31)...)
		upd = append(upd, itemsImage(i+1, i*31)...)
		upd = append(upd, itemsImage(i+1, i*31+1)...)
		del = append(del, itemsImage(i+1, i*31+1)...)
	}
	out := map[string][]byte{
		"insert": rowsEvent(replication.WRITE_ROWS_EVENTv2, len(itemsCols), ins, 0),
		"update": rowsEvent(replication.UPDATE_ROWS_EVENTv2, len(itemsCols), upd, 0),
		"delete": rowsEvent(replication.DELETE_ROWS_EVENTv2, len(itemsCols), del, 0),
	}
	if mariadb {
		out["update compressed"] = rowsEvent(replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1, len(itemsCols), upd, 0)
	}
	return out
}

// rowsHarness runs state.rows on parsed events, as the reader does.
type rowsHarness struct {
	s      *state
	parser *replication.BinlogParser
}

func newRowsHarness(t testing.TB, cols []testCol, mariadb, native bool) *rowsHarness {
	return newRowsHarnessOf(t, cols, mariadb, native, true)
}

// newRowsHarnessOf is newRowsHarness for a table streamed or not.
func newRowsHarnessOf(t testing.TB, cols []testCol, mariadb, native, streamed bool) *rowsHarness {
	flavor := mysql.MySQLFlavor
	if mariadb {
		flavor = mysql.MariaDBFlavor
	}
	p := newParser(native, mariadb)
	if _, err := p.Parse(fdeEvent()); err != nil {
		t.Fatal(err)
	}
	ev, err := p.Parse(tableMapEvent(cols, mariadb))
	if err != nil {
		t.Fatal(err)
	}
	tm := ev.Event.(*replication.TableMapEvent)
	defs, err := colDefs(tm, mariadb, testColls)
	if err != nil {
		t.Fatal(err)
	}
	// Described as the table map has it: no query for the types.
	described := &sluice.Table{Name: sluice.TableName{Schema: "db", Name: "t"}, Key: []int{0}}
	for _, d := range defs {
		described.Columns = append(described.Columns, sluice.Column{Name: d.name, Type: d.typeName(), Nullable: d.nullable, Collation: d.collation})
	}
	repl := map[string]*sluice.Table{"db.t": described}
	if !streamed {
		repl = map[string]*sluice.Table{}
	}
	r := &Reader{flavor: flavor, colls: testColls, repl: repl,
		out: make(chan batch, 1), budget: source.NewBudget(1 << 40), log: slog.New(discardHandler{})}
	s := &state{r: r, pos: &position{mode: modeFile, file: "b.000001", off: 4},
		byID: map[uint64]*tableMap{}, byName: map[string]*sluice.Table{"db.t": described}}
	if err := s.tableMap(tm); err != nil {
		t.Fatal(err)
	}
	return &rowsHarness{s: s, parser: p}
}

// run hands one event to state.rows and returns its changes.
func (h *rowsHarness) run(t testing.TB, event []byte) ([]sluice.Change, error) {
	ev, err := h.parser.Parse(event)
	if err != nil {
		return nil, err
	}
	if err := h.s.rows(t.Context(), ev.Header, ev.Event.(*replication.RowsEvent)); err != nil {
		return nil, err
	}
	h.s.flush(t.Context()) // as the stream does before it waits for the source
	select {
	case b := <-h.s.r.out:
		h.s.r.budget.Give(b.size)
		return b.changes, b.err
	default:
		return nil, nil
	}
}

// TestRowsNativeMatchesGoMySQL runs events through state.rows with the
// native decoder and with go-mysql's: the changes are the same.
func TestRowsNativeMatchesGoMySQL(t *testing.T) {
	for _, mariadb := range []bool{true, false} {
		for name, event := range itemsEvents(mariadb) {
			t.Run(fmt.Sprintf("%s/mariadb=%v", name, mariadb), func(t *testing.T) {
				old := newRowsHarness(t, itemsCols, mariadb, false)
				native := newRowsHarness(t, itemsCols, mariadb, true)
				want, err := old.run(t, slices.Clone(event))
				if err != nil {
					t.Fatal(err)
				}
				got, err := native.run(t, slices.Clone(event))
				if err != nil {
					t.Fatal(err)
				}
				if len(want) != 10 || !reflect.DeepEqual(want, got) {
					t.Fatalf("changes differ\nwant %v\ngot  %v", want, got)
				}
			})
		}
	}
}

// BenchmarkRowsDecode measures state.rows on events of ten rows, from
// the event's bytes (go-mysql's parsing included) to the changes.
func BenchmarkRowsDecode(b *testing.B) {
	events := itemsEvents(true)
	for _, name := range []string{"insert", "update", "delete"} {
		for _, path := range []string{"go-mysql", "native"} {
			b.Run(name+"/"+path, func(b *testing.B) {
				h := newRowsHarness(b, itemsCols, true, path == "native")
				event := events[name]
				b.ReportAllocs()
				for b.Loop() {
					cs, err := h.run(b, event)
					if err != nil || len(cs) != 10 {
						b.Fatal(len(cs), err)
					}
				}
			})
		}
	}
}

// TestRowTokens: the rows' tokens built for an event are the ones
// position.token gives.
func TestRowTokens(t *testing.T) {
	gset, err := mysql.ParseMariadbGTIDSet("0-1-42,1-2-7")
	if err != nil {
		t.Fatal(err)
	}
	for _, pos := range []*position{
		{mode: modeFile, file: "b.000001", off: 4},
		{mode: modeMariaDB, gset: gset},
	} {
		for _, txn := range []string{"", "0-1-43"} {
			for _, id := range []evID{{pos: 1000}, {pos: 123456, sub: 3}} {
				s := &state{pos: pos, txn: txn}
				tokens := s.rowTokens(id, 7, 12)
				for j := 7; j < 12; j++ {
					p := *pos
					p.txn, p.at = txn, &rowID{ev: id, row: j}
					if got, want := tokens.of(j), p.token(); got != want {
						t.Errorf("token %q, want %q", got, want)
					}
				}
			}
		}
	}
}

// TestRowsLeftToGoMySQL: events the native decoder leaves to go-mysql
// (a JSON column, a row image missing columns) and the counting of rows
// of a table not streamed give what go-mysql's decoding gives.
func TestRowsLeftToGoMySQL(t *testing.T) {
	jsonCols := []testCol{{name: "id", typ: mysql.MYSQL_TYPE_LONG}, {name: "j", typ: mysql.MYSQL_TYPE_JSON, meta: 4, nullable: true}}
	jsonRows := append(image(le(1, 4), append(le(2, 4), 0x04, 0x01)), image(le(2, 4), nil)...) // true, NULL
	minimal := image(le(1, 8))                                                                 // the key alone: binlog_row_image=MINIMAL
	for _, tc := range []struct {
		name     string
		cols     []testCol
		event    []byte
		streamed bool
		wantErr  bool
	}{
		{"json", jsonCols, rowsEvent(replication.WRITE_ROWS_EVENTv2, 2, jsonRows, 0), true, false},
		{"minimal image", itemsCols, rowsEventBitmap(replication.DELETE_ROWS_EVENTv2, 4, minimal, 0, []byte{0x01}), true, true},
		{"not streamed", itemsCols, itemsEvents(false)["update"], false, false},
		{"not streamed, minimal image", itemsCols, rowsEventBitmap(replication.DELETE_ROWS_EVENTv2, 4, append(minimal, image(le(2, 8))...), 0, []byte{0x01}), false, false},
		{"not streamed, json", jsonCols, rowsEvent(replication.WRITE_ROWS_EVENTv2, 2, jsonRows, 0), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var results [2]struct {
				cs      []sluice.Change
				err     error
				lastRow *rowID
			}
			for i, native := range []bool{false, true} {
				h := newRowsHarnessOf(t, tc.cols, false, native, tc.streamed)
				r := &results[i]
				r.cs, r.err = h.run(t, slices.Clone(tc.event))
				r.lastRow = h.s.lastRow
			}
			old, got := results[0], results[1]
			if (got.err != nil) != tc.wantErr || (old.err != nil) != tc.wantErr {
				t.Fatalf("errors: go-mysql %v, native %v", old.err, got.err)
			}
			if tc.wantErr && got.err.Error() != old.err.Error() {
				t.Fatalf("error %q, go-mysql's %q", got.err, old.err)
			}
			if !reflect.DeepEqual(old.cs, got.cs) || !reflect.DeepEqual(old.lastRow, got.lastRow) || got.lastRow == nil && !tc.wantErr {
				t.Fatalf("changes %v (last row %v), go-mysql's %v (last row %v)", got.cs, got.lastRow, old.cs, old.lastRow)
			}
		})
	}
}

// TestDecodesClean: decodesClean never says clean where the charset's
// decoder fails.
func TestDecodesClean(t *testing.T) {
	for name, dec := range charsets {
		if dec == nil {
			continue
		}
		for _, v := range []string{"", "plain", "café", "caf\xe9", "\x80", "\xff\xfe", "€"} {
			if _, err := dec(v); err != nil && decodesClean(name, []byte(v)) {
				t.Errorf("%s: %q said clean, decoder fails: %v", name, v, err)
			}
		}
	}
}
