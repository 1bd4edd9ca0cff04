package binlog

import (
	"fmt"
	"strconv"
	"strings"

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
		if typ == mysql.MYSQL_TYPE_STRING && meta >= 256 {
			b0, b1 := byte(meta>>8), byte(meta&0xff)
			if b0 == mysql.MYSQL_TYPE_ENUM || b0 == mysql.MYSQL_TYPE_SET {
				d.typ = b0
			} else if b0&0x30 != 0x30 {
				d.padLen = int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
			} else {
				d.padLen = int(b1)
			}
		} else if typ == mysql.MYSQL_TYPE_STRING {
			d.padLen = int(meta)
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
