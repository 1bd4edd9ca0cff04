package binlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/mycopy"
)

// colDef is how one column of a table map is decoded: everything the value
// conversion needs, and what schema comparison looks at.
type colDef struct {
	name     string
	rawTyp   byte // type as the table map has it
	typ      byte // real type (ENUM/SET resolved from a STRING's meta)
	meta     uint16
	unsigned bool
	binary   bool // character column with the binary collation (BINARY/VARBINARY/BLOB)
	padLen   int  // BINARY(n): n, to restore the trailing 0x00 the binlog drops
	labels   []string
	nullable bool
	mariadb  bool // DOUBLE formatting differs between the flavors
	// Character columns (and ENUM/SET, whose labels the table map holds
	// in the column's character set): the collation's name (empty for
	// binary and non-string columns), the character set, and how its
	// bytes become UTF-8 (nil: carried as they are).
	collation string
	charset   string
	decode    decoder
	collID    uint64 // the table map's collation id
}

// sameType reports whether two definitions hold values the same way.
func (c colDef) sameType(o colDef) bool {
	if c.typ != o.typ || c.meta != o.meta || c.unsigned != o.unsigned || c.binary != o.binary {
		return false
	}
	if len(c.labels) != len(o.labels) {
		return false
	}
	for i := range c.labels {
		if c.labels[i] != o.labels[i] {
			return false
		}
	}
	return true
}

// typeName spells the column type the way MySQL would, as far as the
// table map tells it (lengths of character columns are in bytes there).
func (c colDef) typeName() string {
	u := ""
	if c.unsigned {
		u = " unsigned"
	}
	switch c.typ {
	case mysql.MYSQL_TYPE_TINY:
		return "tinyint" + u
	case mysql.MYSQL_TYPE_SHORT:
		return "smallint" + u
	case mysql.MYSQL_TYPE_INT24:
		return "mediumint" + u
	case mysql.MYSQL_TYPE_LONG:
		return "int" + u
	case mysql.MYSQL_TYPE_LONGLONG:
		return "bigint" + u
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		return fmt.Sprintf("decimal(%d,%d)%s", c.meta>>8, c.meta&0xff, u)
	case mysql.MYSQL_TYPE_FLOAT:
		return "float" + u
	case mysql.MYSQL_TYPE_DOUBLE:
		return "double" + u
	case mysql.MYSQL_TYPE_BIT:
		return fmt.Sprintf("bit(%d)", (c.meta>>8)*8+(c.meta&0xff))
	case mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2:
		return withFsp("timestamp", c)
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2:
		return withFsp("datetime", c)
	case mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_TIME2:
		return withFsp("time", c)
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE:
		return "date"
	case mysql.MYSQL_TYPE_YEAR:
		return "year"
	case mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET:
		name := "enum"
		if c.typ == mysql.MYSQL_TYPE_SET {
			name = "set"
		}
		q := make([]string, len(c.labels))
		for i, l := range c.labels {
			q[i] = "'" + strings.ReplaceAll(l, "'", "''") + "'"
		}
		return name + "(" + strings.Join(q, ",") + ")"
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		if c.binary {
			return fmt.Sprintf("varbinary(%d)", c.meta)
		}
		return fmt.Sprintf("varchar(%d bytes)", c.meta)
	case mysql.MYSQL_TYPE_STRING:
		if c.binary {
			return fmt.Sprintf("binary(%d)", c.padLen)
		}
		return fmt.Sprintf("char(%d bytes)", c.padLen)
	case mysql.MYSQL_TYPE_BLOB:
		names := [...]string{"", "tiny", "", "medium", "long"}
		p := ""
		if int(c.meta) < len(names) {
			p = names[c.meta]
		}
		if c.binary {
			return p + "blob"
		}
		return p + "text"
	case mysql.MYSQL_TYPE_JSON:
		return "json"
	case mysql.MYSQL_TYPE_GEOMETRY:
		return "geometry"
	}
	return fmt.Sprintf("type%d", c.typ)
}

func withFsp(name string, c colDef) string {
	switch c.typ {
	case mysql.MYSQL_TYPE_TIMESTAMP2, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIME2:
		if c.meta > 0 {
			return fmt.Sprintf("%s(%d)", name, c.meta)
		}
	}
	return name
}

// fsp is the number of fractional-second digits of a temporal column.
func (c colDef) fsp() int {
	switch c.typ {
	case mysql.MYSQL_TYPE_TIMESTAMP2, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIME2:
		return int(c.meta)
	}
	return 0
}

// colDefs reads a table map's columns. It needs binlog_row_metadata=FULL
// (column names); without it the error says so. colls resolves the
// collation ids the table map gives for character columns.
func colDefs(tm *replication.TableMapEvent, mariadb bool, colls map[uint64]collation) ([]colDef, error) {
	names := tm.ColumnNameString()
	if len(names) != int(tm.ColumnCount) {
		return nil, fmt.Errorf("table map of %s.%s carries no column names: the server must log binlog_row_metadata=FULL "+
			"(SET GLOBAL binlog_row_metadata = FULL, and in the server's configuration)", tm.Schema, tm.Table)
	}
	unsigned := tm.UnsignedMap()
	collations := tm.CollationMap()
	enumSetCollations := tm.EnumSetCollationMap()
	enums := tm.EnumStrValueMap()
	sets := tm.SetStrValueMap()
	defs := make([]colDef, tm.ColumnCount)
	for i := range defs {
		typ := tm.ColumnType[i]
		meta := tm.ColumnMeta[i]
		d := colDef{name: names[i], rawTyp: typ, typ: typ, meta: meta, unsigned: unsigned[i], mariadb: mariadb}
		_, d.nullable = tm.Nullable(i)
		if typ == mysql.MYSQL_TYPE_STRING {
			if b0 := byte(meta >> 8); meta >= 256 && (b0 == mysql.MYSQL_TYPE_ENUM || b0 == mysql.MYSQL_TYPE_SET) {
				d.typ = b0
			} else {
				_, d.padLen = stringMeta(meta)
			}
		}
		if typ == mysql.MYSQL_TYPE_DATE {
			d.typ = mysql.MYSQL_TYPE_DATE
		}
		enumOrSet := d.typ == mysql.MYSQL_TYPE_ENUM || d.typ == mysql.MYSQL_TYPE_SET
		var collID uint64
		var isChar bool
		if enumOrSet {
			collID, isChar = enumSetCollations[i]
		} else if tm.IsCharacterColumn(i) {
			collID, isChar = collations[i]
			if !isChar {
				return nil, fmt.Errorf("table map of %s.%s carries no character set for column %s: the server must log binlog_row_metadata=FULL", tm.Schema, tm.Table, d.name)
			}
		}
		if isChar {
			d.collID = collID
			if collID == 63 {
				d.binary = true
			}
			if err := d.setCharset(collID, colls, string(tm.Schema)+"."+string(tm.Table)); err != nil {
				return nil, err
			}
		}
		switch d.typ {
		case mysql.MYSQL_TYPE_ENUM:
			d.labels = enums[i]
		case mysql.MYSQL_TYPE_SET:
			d.labels = sets[i]
		}
		if enumOrSet && d.labels == nil {
			return nil, fmt.Errorf("table map of %s.%s carries no labels for %s column %s: the server must log binlog_row_metadata=FULL",
				tm.Schema, tm.Table, d.typeName(), d.name)
		}
		if enumOrSet && d.decode != nil {
			// The labels are in the column's character set too.
			labels := make([]string, len(d.labels))
			for j, l := range d.labels {
				var err error
				if labels[j], err = d.decode(l); err != nil {
					return nil, fmt.Errorf("table map of %s.%s: %s column %s label %d: %w", tm.Schema, tm.Table, d.typeName(), d.name, j+1, err)
				}
			}
			d.labels = labels
		}
		defs[i] = d
	}
	return defs, nil
}

// setCharset resolves a character column's collation id and picks the
// decoder of its character set, refusing one the reader does not convert.
func (c *colDef) setCharset(id uint64, colls map[uint64]collation, table string) error {
	coll, ok := colls[id]
	if !ok {
		if id != 63 {
			return fmt.Errorf("table %s column %s: the table map gives collation id %d, which the source does not list in information_schema.COLLATIONS: sluice cannot tell the column's character set", table, c.name, id)
		}
		coll = collation{name: "binary", charset: "binary"}
	}
	dec, ok := charsets[coll.charset]
	if !ok {
		return &charsetError{table: table, column: c.name, charset: coll.charset, logged: true}
	}
	c.charset, c.collation, c.decode = coll.charset, columnCollation(coll.charset, coll.name), dec
	return nil
}

// charsetError refuses a character set the reader does not convert.
type charsetError struct {
	table, column, charset string
	logged                 bool // found in a table map, not at Open
}

func (e *charsetError) Error() string {
	where, then := "", "then start the stream"
	if e.logged {
		// Row images written before the conversion keep their bytes.
		where, then = " in the binlog's row images", "then start the stream at a position after the conversion"
	}
	return fmt.Sprintf("table %s column %s has character set %s%s, which sluice does not convert to UTF-8 (it converts %s): "+
		"convert the column to utf8mb4 (ALTER TABLE %s MODIFY %s … CHARACTER SET utf8mb4, or ALTER TABLE %s CONVERT TO CHARACTER SET utf8mb4), %s",
		e.table, e.column, e.charset, where, supportedCharsets(), e.table, e.column, e.table, then)
}

// convert turns one value go-mysql decoded into MySQL's text-protocol form.
func (c *colDef) convert(v any) (sluice.Value, error) {
	if v == nil {
		return sluice.Null, nil
	}
	switch c.typ {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		switch x := v.(type) {
		case int8:
			return sluice.Text(strconv.FormatInt(int64(x), 10)), nil
		case int16:
			return sluice.Text(strconv.FormatInt(int64(x), 10)), nil
		case int32:
			return sluice.Text(strconv.FormatInt(int64(x), 10)), nil
		case int64:
			return sluice.Text(strconv.FormatInt(x, 10)), nil
		case uint8:
			return sluice.Text(strconv.FormatUint(uint64(x), 10)), nil
		case uint16:
			return sluice.Text(strconv.FormatUint(uint64(x), 10)), nil
		case uint32:
			return sluice.Text(strconv.FormatUint(uint64(x), 10)), nil
		case uint64:
			return sluice.Text(strconv.FormatUint(x, 10)), nil
		}
	case mysql.MYSQL_TYPE_FLOAT:
		if x, ok := v.(float32); ok {
			return sluice.Text(formatFloat(float64(x), 32, c.mariadb)), nil
		}
	case mysql.MYSQL_TYPE_DOUBLE:
		if x, ok := v.(float64); ok {
			return sluice.Text(formatFloat(x, 64, c.mariadb)), nil
		}
	case mysql.MYSQL_TYPE_BIT:
		if x, ok := v.(int64); ok {
			nbits := int(c.meta>>8)*8 + int(c.meta&0xff)
			n := (nbits + 7) / 8
			b := make([]byte, n)
			for i := n - 1; i >= 0; i-- {
				b[i] = byte(x)
				x >>= 8
			}
			return sluice.Text(string(b)), nil
		}
	case mysql.MYSQL_TYPE_YEAR:
		if x, ok := v.(int); ok {
			return sluice.Text(fmt.Sprintf("%04d", x)), nil
		}
	case mysql.MYSQL_TYPE_ENUM:
		if x, ok := v.(int64); ok {
			if x == 0 {
				return sluice.Text(""), nil // the error value '' of a non-strict insert
			}
			if int(x) <= len(c.labels) {
				return sluice.Text(c.labels[x-1]), nil
			}
			return sluice.Value{}, fmt.Errorf("enum index %d out of range (%d labels)", x, len(c.labels))
		}
	case mysql.MYSQL_TYPE_SET:
		if x, ok := v.(int64); ok {
			var b strings.Builder
			for i, l := range c.labels {
				if x&(1<<uint(i)) != 0 {
					if b.Len() > 0 {
						b.WriteByte(',')
					}
					b.WriteString(l)
				}
			}
			return sluice.Text(b.String()), nil
		}
	case mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_TIME2:
		if s, ok := v.(string); ok {
			// go-mysql leaves out a fraction that is zero; MySQL prints
			// all fsp digits.
			if d := c.fsp(); d > 0 && !strings.Contains(s, ".") {
				s += "." + strings.Repeat("0", d)
			}
			return sluice.Text(s), nil
		}
	case mysql.MYSQL_TYPE_STRING:
		if s, ok := v.(string); ok {
			if c.binary && len(s) < c.padLen {
				return sluice.Text(s + strings.Repeat("\x00", c.padLen-len(s))), nil
			}
			return c.text(strings.Clone(s))
		}
	}
	switch x := v.(type) {
	case string:
		return c.text(strings.Clone(x))
	case []byte:
		return c.text(string(x))
	case fmt.Stringer: // TIMESTAMP values (fracTime), rendered in UTC
		return sluice.Text(x.String()), nil
	}
	return sluice.Value{}, fmt.Errorf("cannot convert %T value of %s column", v, c.typeName())
}

// text decodes a character column's bytes to UTF-8.
func (c *colDef) text(s string) (sluice.Value, error) {
	if c.decode == nil {
		return sluice.Text(s), nil
	}
	u, err := c.decode(s)
	if err != nil {
		return sluice.Value{}, fmt.Errorf("%s column: %w", c.charset, err)
	}
	return sluice.Text(u), nil
}

// formatFloat prints a FLOAT (bits 32) or a DOUBLE as the shortest
// decimal text that reads back to the identical value: the text protocol's
// own form is not exact for FLOAT (both flavors print 6 significant
// digits, so 16777216 reads 16777200), and a target that parses it would
// store another value. A FLOAT is written in Go's %g layout
// (1.234567e+06), which every target parses. A DOUBLE is written as the
// text protocol writes it, which is exact: MariaDB in the same %g layout
// (checked against 4,000 random values), MySQL 8 with a bare exponent
// (1.5e-7, 1e20; MySQL is not covered by the tests here).
func formatFloat(f float64, bits int, mariadb bool) string {
	return mycopy.FormatFloat(f, bits, mariadb)
}

type tableMap struct {
	repl  bool
	name  string
	table *sluice.Table
	defs  []colDef
	// A streamed table's native decoding (nil: go-mysql decodes its
	// rows), and which columns are in its key.
	codecs []colCodec
	isKey  []bool
	// Another table's layout, to count the rows of its events (walkDone
	// with walk nil: go-mysql counts them).
	walk     []colCodec
	walkDone bool
}

func (s *state) tableMap(e *replication.TableMapEvent) error {
	name := string(e.Schema) + "." + string(e.Table)
	described := s.r.repl[name]
	if described == nil {
		s.byID[e.TableID] = &tableMap{name: name}
		return nil
	}
	if old := s.byID[e.TableID]; old != nil && old.repl && old.name == name {
		// The same map again (MySQL writes one per statement): nothing to redo
		// unless the columns changed.
		if len(old.defs) == int(e.ColumnCount) && sameDefsQuick(old.defs, e) {
			return nil
		}
	}
	defs, err := colDefs(e, s.r.flavor == mysql.MariaDBFlavor, s.r.colls)
	if err != nil {
		return &sluice.TableError{Table: described.Name, Err: fmt.Errorf("binlog: %w", err)}
	}
	if s.defs == nil {
		s.defs = map[string][]colDef{}
	}
	prev := s.defs[name]
	if !s.live[name] {
		// Only maps of changes skipped as below the resume position were
		// seen: they may predate a DDL the operator has since applied to
		// the target. Compare with the table as described at Open.
		prev = nil
	}
	table := s.byName[name]
	changed := false
	if prev == nil {
		changed = !shapeMatches(table, defs)
	} else {
		for _, p := range prev {
			j := indexDef(defs, p.name)
			if j < 0 {
				return fmt.Errorf("binlog: table %s: column %s was dropped or renamed on the source: the stream cannot follow it; make the target match, then restart the stream", name, p.name)
			}
			if !p.sameType(defs[j]) {
				return fmt.Errorf("binlog: table %s: column %s changed type on the source (from %s to %s): the stream cannot follow it; make the target match, then restart the stream",
					name, p.name, p.typeName(), defs[j].typeName())
			}
		}
		changed = len(prev) != len(defs)
		for i := range defs {
			if !changed && defs[i].name != prev[i].name {
				changed = true
			}
		}
	}
	if changed {
		nt, err := buildTable(described, defs, e, s.r.currentColumns)
		if err != nil {
			return err
		}
		if prev != nil {
			s.r.log.Info("binlog: table changed on the source; following it", "table", name, "columns", len(defs))
		}
		table = nt
		s.byName[name] = nt
	}
	s.defs[name] = defs
	tm := &tableMap{repl: true, name: name, table: table, defs: defs, codecs: rowCodecs(defs)}
	tm.isKey = make([]bool, len(defs))
	for _, k := range table.Key {
		if k >= 0 && k < len(defs) {
			tm.isKey[k] = true
		}
	}
	s.byID[e.TableID] = tm
	return nil
}

func sameDefsQuick(defs []colDef, e *replication.TableMapEvent) bool {
	names := e.ColumnNameString()
	if len(names) != len(defs) {
		return false
	}
	// A column's character set can change with its byte length kept
	// (VARCHAR(20) latin1 to VARCHAR(5) utf8mb4): its decoder with it.
	colls, enumSet := e.CollationMap(), e.EnumSetCollationMap()
	for i, d := range defs {
		if d.name != names[i] || d.meta != e.ColumnMeta[i] || d.rawTyp != e.ColumnType[i] {
			return false
		}
		id, ok := colls[i]
		if !ok {
			id = enumSet[i]
		}
		if id != d.collID {
			return false
		}
	}
	return true
}

func indexDef(defs []colDef, name string) int {
	for i, d := range defs {
		if d.name == name {
			return i
		}
	}
	return -1
}

// shapeMatches reports whether the described table has exactly the map's
// columns in order, so its pointer can be reused.
func shapeMatches(t *sluice.Table, defs []colDef) bool {
	if t == nil || len(t.Columns) != len(defs) {
		return false
	}
	for i, d := range defs {
		if t.Columns[i].Name != d.name || t.Columns[i].Collation != d.collation {
			return false
		}
	}
	return true
}

// buildTable describes a table from its table map. Column types are the
// server's spelling (information_schema's COLUMN_TYPE) where the column
// has the same base type now, else spelled from the table map; a column's
// generation expression (which the table map does not carry) is the
// server's.
func buildTable(described *sluice.Table, defs []colDef, e *replication.TableMapEvent, current func(sluice.TableName) map[string]sluice.Column) (*sluice.Table, error) {
	t := &sluice.Table{Name: described.Name}
	var now map[string]sluice.Column
	for _, d := range defs {
		typ, gen := d.typeName(), ""
		if j := described.ColumnIndex(d.name); j >= 0 && sameBase(described.Columns[j].Type, typ) {
			typ, gen = described.Columns[j].Type, described.Columns[j].Generated
		} else {
			if now == nil {
				now = current(described.Name)
			}
			if c, ok := now[d.name]; ok && sameBase(c.Type, typ) {
				typ, gen = c.Type, c.Generated
			}
		}
		t.Columns = append(t.Columns, sluice.Column{Name: d.name, Type: typ, Nullable: d.nullable, Collation: d.collation, Generated: gen})
	}
	if len(e.PrimaryKey) > 0 {
		for _, k := range e.PrimaryKey {
			t.Key = append(t.Key, int(k))
		}
	} else {
		for _, k := range described.KeyNames() {
			j := t.ColumnIndex(k)
			if j < 0 {
				return nil, fmt.Errorf("binlog: table %s: primary key column %s is not in the binlog's row image", described.Name, k)
			}
			t.Key = append(t.Key, j)
		}
	}
	if len(t.Key) == 0 {
		return nil, fmt.Errorf("binlog: table %s has no primary key in the binlog's table map", described.Name)
	}
	return t, nil
}

// noForeignKeyChecks is the rows event flag of a session that ran with
// foreign_key_checks = 0 (Rows_log_event::NO_FOREIGN_KEY_CHECKS_F): its
// changes fired no foreign-key action, which a replica's InnoDB then
// leaves alone too.
const noForeignKeyChecks = 0x02

func (s *state) rows(ctx context.Context, h *replication.EventHeader, e *replication.RowsEvent) error {
	id := evID{pos: h.LogPos, sub: s.sub}
	tm := s.byID[e.TableID]
	repl := tm != nil && tm.repl
	step := 1
	switch h.EventType {
	case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		step = 2 // before and after images
	}
	native := false // the images are in s.dec, not in e.Rows
	images := len(e.Rows)
	if raw, ok := rawRowsOf(e); ok {
		var err error
		defer s.dec.release()
		if native, images, err = s.decodeRows(h, e, tm, raw); err != nil {
			return fmt.Errorf("binlog: decode the rows event ending at %s: %w", s.at(h), err)
		}
	}
	n := images / step
	// Resuming inside a transaction: every row up to the position's is
	// done, whichever table it belongs to.
	first := 0
	if s.skipTo != nil {
		switch id.cmp(s.skipTo.ev) {
		case -1:
			first = n
		case 0:
			if s.skipTo.row >= n {
				return fmt.Errorf("binlog: the position is after row %d of the rows event ending at %d of transaction %s, but that event has %d rows: "+
					"the binlog at %s is not the one the position was taken from", s.skipTo.row, id.pos, orAnon(s.expectTxn), n, s.pos.base())
			}
			first = s.skipTo.row + 1
			s.skipTo = nil
		default:
			return fmt.Errorf("binlog: the position is after row %d of the rows event ending at %d of transaction %s, but the transaction has no event ending there: "+
				"the binlog at %s is not the one the position was taken from", s.skipTo.row, s.skipTo.ev.pos, orAnon(s.expectTxn), s.pos.base())
		}
	}
	if n > 0 {
		s.lastRow = &rowID{ev: id, row: n - 1}
	}
	if !repl {
		return nil
	}
	if s.xa != "" {
		return &XAError{XID: s.xa, GTID: s.txn, Table: tm.table.Name, Before: s.pos.base()}
	}
	var op sluice.Op
	switch h.EventType {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2, replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		op = sluice.OpInsert
	case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		op = sluice.OpUpdate
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2, replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		op = sluice.OpDelete
	default:
		return fmt.Errorf("binlog: table %s: unsupported rows event %s (partial JSON updates?)", tm.name, h.EventType)
	}
	if first < n {
		if err := s.partialRows(h, e, tm, op, step); err != nil {
			return err
		}
	}
	at := time.Unix(int64(h.Timestamp), 0).UTC()
	s.pos.base() // fill the cache on the original, not on the copies below
	// The changes go out in pages of about flushAt (flushFull, below, and
	// the stream before it waits for the source): room for the event's
	// changes is made once, not change by change.
	s.buf = slices.Grow(s.buf, max(n-first, flushAt-len(s.buf)))
	var nat nativeRows
	if native {
		nat = s.nativeRows(tm, op, n-first)
	}
	tokens := s.rowTokens(id, first, n)
	for j := first; j < n; j++ {
		if s.skipK > 0 {
			s.skipK-- // a token of an earlier version counts streamed changes
			continue
		}
		if s.live == nil {
			s.live = map[string]bool{}
		}
		s.live[tm.name] = true
		c := sluice.Change{Table: tm.table, Op: op, Time: at, FKChecksOff: e.Flags&noForeignKeyChecks != 0}
		var err error
		if native {
			c.Row, c.Key, err = nat.change(s, j)
		} else {
			c.Row, c.Key, err = s.goMySQLChange(tm, e, op, step, j)
		}
		if err != nil {
			return err
		}
		c.Pos = sluice.Position{Kind: Kind, Token: tokens.of(j)}
		s.emit(c)
	}
	s.flushFull(ctx)
	return nil
}

// rowTokenPrefix is the token of a row of event id without the row's
// number, which follows it: position.token's, cut before the number.
func (s *state) rowTokenPrefix(id evID) string {
	p := *s.pos
	p.txn, p.at, p.oldK = s.txn, &rowID{ev: id}, 0
	tok := p.token()
	return tok[:len(tok)-1] // "…:0" less its 0
}

// rowTokens are the tokens of rows [first, n) of an event: position
// token's, built as one string (the changes of an event are handed out
// and freed together) from the prefix they share.
type rowTokens struct {
	all   string
	ends  []int // end of row first+i's token in all
	first int
}

func (s *state) rowTokens(id evID, first, n int) rowTokens {
	if first >= n {
		return rowTokens{}
	}
	prefix := s.rowTokenPrefix(id)
	t := rowTokens{ends: make([]int, n-first), first: first}
	b := make([]byte, 0, (n-first)*(len(prefix)+4))
	for j := first; j < n; j++ {
		b = append(b, prefix...)
		b = strconv.AppendInt(b, int64(j), 10)
		t.ends[j-first] = len(b)
	}
	t.all = string(b)
	return t
}

// of returns row j's token.
func (t rowTokens) of(j int) string {
	i := j - t.first
	start := 0
	if i > 0 {
		start = t.ends[i-1]
	}
	return t.all[start:t.ends[i]]
}

// goMySQLChange converts the row and key of change j from the rows
// go-mysql decoded into e.Rows.
func (s *state) goMySQLChange(tm *tableMap, e *replication.RowsEvent, op sluice.Op, step, j int) (row, key sluice.Row, err error) {
	i := j * step
	switch op {
	case sluice.OpInsert:
		row, err = s.convertRow(tm, e.Rows[i])
	case sluice.OpUpdate:
		var old sluice.Row
		if old, err = s.convertRow(tm, e.Rows[i]); err == nil {
			key = tm.table.KeyOf(old)
			row, err = s.convertRow(tm, e.Rows[i+1])
		}
	case sluice.OpDelete:
		var old sluice.Row
		if old, err = s.convertRow(tm, e.Rows[i]); err == nil {
			key = tm.table.KeyOf(old)
		}
	}
	return row, key, err
}

// nativeRows hands out the images s.dec decoded. The event's text is
// one string and its rows and keys share one backing array each: they
// are handed out together and live as long as one another. Rows are cut
// with a full slice expression, so that an append to one cannot write
// into the next.
type nativeRows struct {
	tm         *tableMap
	op         sluice.Op
	keep       string
	rows, keys []sluice.Value
}

// nativeRows prepares the handing out of up to changes changes.
func (s *state) nativeRows(tm *tableMap, op sluice.Op, changes int) nativeRows {
	nr := nativeRows{tm: tm, op: op, keep: string(s.dec.keep)}
	ncols := len(tm.codecs)
	if op != sluice.OpDelete {
		nr.rows = make([]sluice.Value, 0, changes*ncols)
	}
	if op != sluice.OpInsert {
		nr.keys = make([]sluice.Value, 0, changes*len(tm.table.Key))
		if cap(s.scratch) < ncols {
			s.scratch = make(sluice.Row, ncols)
		}
	}
	return nr
}

// change returns the row and key of change j.
func (nr *nativeRows) change(s *state, j int) (row, key sluice.Row, err error) {
	switch nr.op {
	case sluice.OpInsert:
		row, err = nr.image(s, j)
	case sluice.OpUpdate:
		if key, err = nr.key(s, 2*j); err == nil {
			row, err = nr.image(s, 2*j+1)
		}
	case sluice.OpDelete:
		key, err = nr.key(s, j)
	}
	return row, key, err
}

func (nr *nativeRows) image(s *state, img int) (sluice.Row, error) {
	n, at := len(nr.tm.codecs), len(nr.rows)
	nr.rows = nr.rows[:at+n]
	row := nr.rows[at : at+n : at+n]
	return row, s.dec.image(nr.tm, nr.tm.codecs, nr.keep, img, row)
}

func (nr *nativeRows) key(s *state, img int) (sluice.Row, error) {
	old := s.scratch[:len(nr.tm.codecs)]
	if err := s.dec.image(nr.tm, nr.tm.codecs, nr.keep, img, old); err != nil {
		return nil, err
	}
	n, at := len(nr.tm.table.Key), len(nr.keys)
	nr.keys = nr.keys[:at+n]
	key := nr.keys[at : at+n : at+n]
	for i, c := range nr.tm.table.Key {
		key[i] = old[c]
	}
	return key, nil
}

// decodeRows decodes the row images keepRawRows kept. For a streamed
// table whose columns the native decoder handles (and a full row image)
// they go into s.dec (native); for another table they are only walked,
// for their number. Anything else is left to go-mysql's decoding, into
// e.Rows, as before the native decoder.
func (s *state) decodeRows(h *replication.EventHeader, e *replication.RowsEvent, tm *tableMap, raw rawRows) (native bool, images int, err error) {
	update, before, compressed := false, false, false
	switch h.EventType {
	case replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
	case replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		compressed = true
	case replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2:
		update, before = true, true
	case replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		update, before, compressed = true, true, true
	case replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2:
		before = true
	case replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		before, compressed = true, true
	default:
		// v0 events (whose updates go-mysql reads as single images) and
		// MySQL's PARTIAL_UPDATE_ROWS_EVENT.
		return s.goMySQLRows(e, raw)
	}
	data := []byte(raw)
	if compressed {
		if data, err = decompressRows(raw); err != nil {
			return false, 0, err
		}
	}
	ncols := int(e.ColumnCount)
	var bm2 []byte
	if update {
		bm2 = e.ColumnBitmap2
	}
	if tm != nil && tm.repl {
		if tm.codecs == nil || ncols != len(tm.codecs) || !bitmapFull(e.ColumnBitmap1, ncols) || update && !bitmapFull(bm2, ncols) {
			// JSON, or a row image missing columns (which
			// partialRows and convertRow report).
			return s.goMySQLRows(e, raw)
		}
		if err := s.dec.decode(data, tm.codecs, update, before, tm.isKey); err != nil {
			return false, 0, err
		}
		return true, s.dec.images, nil
	}
	var cols []colCodec
	ok := false
	if tm != nil && tm.walkDone {
		cols, ok = tm.walk, tm.walk != nil
	} else if e.Table != nil {
		cols, ok = walkCodecs(e.Table)
		if tm != nil {
			tm.walk, tm.walkDone = cols, true
		}
	}
	if !ok || ncols != len(cols) {
		return s.goMySQLRows(e, raw)
	}
	images, err = countImages(data, cols, e.ColumnBitmap1, bm2)
	return true, images, err
}

// goMySQLRows has go-mysql decode the images, into e.Rows.
func (s *state) goMySQLRows(e *replication.RowsEvent, raw rawRows) (bool, int, error) {
	e.Rows = nil
	if err := e.DecodeData(0, raw); err != nil {
		return false, 0, err
	}
	return false, len(e.Rows), nil
}

// decompressRows inflates the rows of a MariaDB compressed rows event
// (go-mysql's DecompressMariadbData, which indexes a short header
// without checking it).
func decompressRows(data []byte) ([]byte, error) {
	if len(data) < 1 || len(data) < 1+int(data[0]&0x07) {
		return nil, errors.New("compressed rows shorter than their header")
	}
	out, err := mysql.DecompressMariadbData(data)
	if err != nil {
		return nil, fmt.Errorf("decompress rows: %w", err)
	}
	return out, nil
}

func (s *state) convertRow(tm *tableMap, vals []any) (sluice.Row, error) {
	if len(vals) != len(tm.defs) {
		return nil, fmt.Errorf("binlog: table %s: row has %d values, table map %d columns (binlog_row_image must be FULL)", tm.name, len(vals), len(tm.defs))
	}
	row := make(sluice.Row, len(vals))
	for i, v := range vals {
		val, err := tm.defs[i].convert(v)
		if err != nil {
			return nil, fmt.Errorf("binlog: table %s column %s: %w", tm.name, tm.defs[i].name, err)
		}
		row[i] = val
	}
	return row, nil
}

// sameBase compares the first word of two type spellings ("int(11)
// unsigned" and "int unsigned" are the same base type).
func sameBase(a, b string) bool {
	base := func(s string) string {
		if i := strings.IndexAny(s, "( "); i >= 0 {
			s = s[:i]
		}
		return strings.ToLower(s)
	}
	return base(a) == base(b)
}
