package mysql

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/sluice-cdc/sluice"
)

// valueKind says how a column's text values are written as SQL literals.
type valueKind uint8

const (
	// kindString values are quoted string literals. The session runs with
	// NO_BACKSLASH_ESCAPES (checked on every new connection), so the only
	// character that needs escaping is the quote, which is doubled; every
	// other byte, NUL and backslash included, stands for itself. utf8mb4 has
	// no multi-byte character containing the byte 0x27, so a quote can never
	// hide in a character.
	kindString valueKind = iota
	// kindNumber values are written bare when they are a plain decimal or
	// float literal, so that a comparison with an integer or decimal key
	// column is exact (MySQL compares a number with a string as doubles,
	// which confuses integers above 2^53). Anything else is quoted, and the
	// strict sql_mode rejects it.
	kindNumber
	// kindBinary values (BINARY, VARBINARY, BLOB types, BIT) are raw bytes
	// written as hex literals X'…', which no connection charset touches.
	kindBinary
	// kindFloat32 values (FLOAT) are written as the exact value of the
	// float32 they name. The server reads a literal as a double and then
	// narrows it, and the shortest text of the largest float32,
	// 3.4028235e38, is a double just past it: out of range, where the
	// exact 3.4028234663852886e+38 narrows to the same float32.
	kindFloat32
)

// sqlColumn is a target column as the SQL builder needs it.
type sqlColumn struct {
	Name string
	Kind valueKind
}

// charset is a string column's character set and collation on the target
// (empty for other columns).
type charset struct{ name, collation string }

// quoteIdent quotes a MySQL identifier with backticks, doubling any
// backtick inside it. This is independent of ANSI_QUOTES.
func quoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// tableIdent quotes a table name; an empty schema means the connection's
// database.
func tableIdent(n sluice.TableName) string {
	if n.Schema == "" {
		return quoteIdent(n.Name)
	}
	return quoteIdent(n.Schema) + "." + quoteIdent(n.Name)
}

// quoteString appends s as a string literal valid under NO_BACKSLASH_ESCAPES.
func quoteString(b *strings.Builder, s string) {
	b.WriteByte('\'')
	for {
		i := strings.IndexByte(s, '\'')
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i+1])
		b.WriteByte('\'')
		s = s[i+1:]
	}
	b.WriteByte('\'')
}

// hexLiteral appends raw bytes as X'…'.
func hexLiteral(b *strings.Builder, s string) {
	b.WriteString("X'")
	var buf [64]byte
	for len(s) > 0 {
		n := min(len(s), len(buf)/2)
		hex.Encode(buf[:], []byte(s[:n]))
		b.Write(buf[:2*n])
		s = s[n:]
	}
	b.WriteByte('\'')
}

// isNumber reports whether s is a plain numeric literal: an optional sign,
// digits with an optional point, an optional exponent. Such text is safe to
// write bare.
func isNumber(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		exp := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(s)
}

// writeValue appends v as a literal for a column of kind k. Unchanged values
// never reach here: rows are grouped by the columns they carry.
func writeValue(b *strings.Builder, k valueKind, v sluice.Value) {
	switch {
	case v.Null:
		b.WriteString("NULL")
	case k == kindBinary:
		hexLiteral(b, v.Text)
	case k == kindNumber && isNumber(v.Text):
		b.WriteString(v.Text)
	case k == kindFloat32 && isNumber(v.Text):
		b.WriteString(float32Literal(v.Text))
	default:
		quoteString(b, v.Text)
	}
}

func valueLen(k valueKind, v sluice.Value) int {
	switch {
	case v.Null:
		return 4
	case k == kindBinary:
		return 3 + 2*len(v.Text)
	case k == kindFloat32:
		// A float32's exact value is at most 24 bytes; text that is no
		// number is quoted.
		return max(2+len(v.Text)+strings.Count(v.Text, "'"), 24)
	}
	return 2 + len(v.Text) + strings.Count(v.Text, "'")
}

// appendQuoted is quoteString appending to dst: the statements of a
// batch's rows are written into a []byte held in a local variable, which
// costs no write barrier per value as a strings.Builder's field does.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '\'')
	for {
		i := strings.IndexByte(s, '\'')
		if i < 0 {
			dst = append(dst, s...)
			break
		}
		dst = append(dst, s[:i+1]...)
		dst = append(dst, '\'')
		s = s[i+1:]
	}
	return append(dst, '\'')
}

// appendHex is hexLiteral appending to dst.
func appendHex(dst []byte, s string) []byte {
	const digits = "0123456789abcdef"
	dst = append(dst, "X'"...)
	for i := 0; i < len(s); i++ {
		dst = append(dst, digits[s[i]>>4], digits[s[i]&0x0f])
	}
	return append(dst, '\'')
}

// appendValue is writeValue appending to dst.
func appendValue(dst []byte, k valueKind, v sluice.Value) []byte {
	switch {
	case v.Null:
		return append(dst, "NULL"...)
	case k == kindBinary:
		return appendHex(dst, v.Text)
	case k == kindNumber && isNumber(v.Text):
		return append(dst, v.Text...)
	case k == kindFloat32 && isNumber(v.Text):
		f, err := strconv.ParseFloat(v.Text, 32)
		if err != nil {
			return append(dst, v.Text...) // as float32Literal
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	}
	return appendQuoted(dst, v.Text)
}

// appendTuple is writeTuple appending to dst.
func appendTuple(dst []byte, cols []sqlColumn, present []int, r sluice.Row) []byte {
	dst = append(dst, '(')
	for i, c := range present {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = appendValue(dst, cols[i].Kind, r[c])
	}
	return append(dst, ')')
}

// float32Literal returns the exact decimal value of the float32 that s
// names (s itself when it does not parse as one: the server then says what
// is wrong with it).
func float32Literal(s string) string {
	f, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return s
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// errRowTooBig is returned when a single row cannot fit a statement under
// the packet limit.
var errRowTooBig = errors.New("row larger than max_allowed_packet")

// upsertSpec describes the multi-row INSERT … ON DUPLICATE KEY UPDATE of one
// table and one set of present columns.
type upsertSpec struct {
	table string      // quoted, qualified
	cols  []sqlColumn // the columns present in every row
	key   []int       // indexes in cols of the primary key
	// guard makes the statement fail instead of updating a different row
	// when an inserted row collides with an existing row on a unique
	// secondary key but not on the primary key (see the package doc).
	guard bool
}

// head returns "INSERT INTO t (cols) VALUES\n".
func (u *upsertSpec) head() string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(u.table)
	b.WriteString(" (")
	for i, c := range u.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c.Name))
	}
	b.WriteString(") VALUES\n")
	return b.String()
}

// tail returns the ON DUPLICATE KEY UPDATE clause. It uses VALUES(col),
// deprecated since MySQL 8.0.20 but still accepted by every MySQL 8 and 9
// release, because the replacement row alias (INSERT … AS new … SET c =
// new.c) is a syntax error on MariaDB (10.11 included) and in Vitess's
// parser. When MySQL drops VALUES(), this is the one place to change.
func (u *upsertSpec) tail() string {
	var b strings.Builder
	b.WriteString("\nON DUPLICATE KEY UPDATE ")
	isKey := make([]bool, len(u.cols))
	for _, k := range u.key {
		isKey[k] = true
	}
	first := true
	sep := func() {
		if !first {
			b.WriteString(", ")
		}
		first = false
	}
	if u.guard {
		// pk1 = IF(pk1 <=> VALUES(pk1) AND …, pk1, NULL): a no-op on the row
		// with the same key, an error (a primary key column cannot be NULL
		// in strict mode) on a row that only shares a unique value. It comes
		// first, so that it sees the row's old values.
		k0 := quoteIdent(u.cols[u.key[0]].Name)
		sep()
		b.WriteString(k0)
		b.WriteString(" = IF(")
		for i, k := range u.key {
			if i > 0 {
				b.WriteString(" AND ")
			}
			n := quoteIdent(u.cols[k].Name)
			b.WriteString(n)
			b.WriteString(" <=> VALUES(")
			b.WriteString(n)
			b.WriteString(")")
		}
		b.WriteString(", ")
		b.WriteString(k0)
		b.WriteString(", NULL)")
	}
	for i, c := range u.cols {
		if isKey[i] {
			continue
		}
		sep()
		n := quoteIdent(c.Name)
		b.WriteString(n)
		b.WriteString(" = VALUES(")
		b.WriteString(n)
		b.WriteString(")")
	}
	if first {
		// Only key columns: the row is right once it exists.
		n := quoteIdent(u.cols[u.key[0]].Name)
		b.WriteString(n)
		b.WriteString(" = ")
		b.WriteString(n)
	}
	return b.String()
}

// writeTuple appends "(v1, v2, …)" for the present columns of r.
func writeTuple(b *strings.Builder, cols []sqlColumn, present []int, r sluice.Row) {
	b.WriteByte('(')
	for i, c := range present {
		if i > 0 {
			b.WriteString(", ")
		}
		writeValue(b, cols[i].Kind, r[c])
	}
	b.WriteByte(')')
}

func tupleLen(cols []sqlColumn, present []int, r sluice.Row) int {
	n := 2
	for i, c := range present {
		n += 2 + valueLen(cols[i].Kind, r[c])
	}
	return n
}

// buildUpserts returns the statements that upsert rows, as few as the limit
// on a statement's length (in bytes) allows. present holds, per column of
// u.cols, the index of the value in each row. It returns, per statement,
// the number of rows it carries.
func buildUpserts(u *upsertSpec, present []int, rows []sluice.Row, limit int) ([]string, []int, error) {
	head, tail := u.head(), u.tail()
	return buildRows(head, ",\n", tail, rows, limit, func(r sluice.Row) int { return tupleLen(u.cols, present, r) },
		func(dst []byte, r sluice.Row) []byte { return appendTuple(dst, u.cols, present, r) })
}

// updateSpec describes the multi-row UPDATE of one table's rows that carry
// only some of its columns: the source left the others unsent (a
// PostgreSQL source's unchanged TOASTed values), so the rows cannot be
// inserted, and INSERT … ON DUPLICATE KEY UPDATE without a NOT NULL column
// that has no default fails under the strict sql_mode even when the row
// exists.
type updateSpec struct {
	table string      // quoted, qualified
	cols  []sqlColumn // the columns present in every row
	key   []int       // indexes in cols of the primary key
	// keyCharsets are the key columns' character sets, aligned with key.
	keyCharsets []charset
}

// buildUpdates returns the statements that update rows in place, as few as
// the limit on a statement's length allows, each with the check to run
// after it, and per statement the number of rows it carries. present is as
// for buildUpserts.
//
// The rows travel in a derived table joined on the primary key, UPDATE t
// JOIN (SELECT … UNION ALL SELECT …) AS u ON t.k = u.k SET t.c = u.c: the
// first SELECT, which matches no row, names the columns, so that each row
// costs only its values. A string key is compared in the key column's own
// character set and collation, as a literal would be: a derived table's
// column has the connection's, and comparing two columns of different
// collations fails on MySQL (or compares under the other one). Values are
// written as for an INSERT and keep their exact text: the derived table's
// column types are the union of the literals' (a DECIMAL wide enough for
// all of them).
//
// An UPDATE passes over a row that is not there, and ROW_COUNT() counts
// only rows whose values changed, so the check counts the rows that have
// the statement's keys and fails unless all do (a subquery returning two
// rows, error 1242, which the target turns into an error saying that the
// target differs from the source).
func buildUpdates(u *updateSpec, present []int, rows []sluice.Row, limit int) (updates, checks []string, counts []int, err error) {
	isKey := make([]bool, len(u.cols))
	for _, k := range u.key {
		isKey[k] = true
	}
	var h strings.Builder
	h.WriteString("UPDATE ")
	h.WriteString(u.table)
	h.WriteString(" AS t JOIN (SELECT ")
	for i, c := range u.cols {
		if i > 0 {
			h.WriteString(", ")
		}
		h.WriteString("NULL AS ")
		h.WriteString(quoteIdent(c.Name))
	}
	h.WriteString(" FROM DUAL WHERE FALSE")
	var tl strings.Builder
	tl.WriteString(") AS u ON ")
	for i, k := range u.key {
		if i > 0 {
			tl.WriteString(" AND ")
		}
		n := quoteIdent(u.cols[k].Name)
		tl.WriteString("t.")
		tl.WriteString(n)
		tl.WriteString(" = ")
		if cs := u.keyCharsets[i]; u.cols[k].Kind == kindString && isCharsetName(cs.name) && isCharsetName(cs.collation) {
			tl.WriteString("CONVERT(u." + n + " USING " + cs.name + ") COLLATE " + cs.collation)
		} else {
			tl.WriteString("u." + n)
		}
	}
	tl.WriteString("\nSET ")
	first := true
	for i, c := range u.cols {
		if isKey[i] {
			continue
		}
		if !first {
			tl.WriteString(", ")
		}
		first = false
		n := quoteIdent(c.Name)
		tl.WriteString("t." + n + " = u." + n)
	}
	if first {
		// Only the key was sent: the row is right once it is there.
		n := quoteIdent(u.cols[u.key[0]].Name)
		tl.WriteString("t." + n + " = t." + n)
	}
	const union = "\nUNION ALL SELECT "
	updates, counts, err = buildRows(h.String(), "", tl.String(), rows, limit,
		func(r sluice.Row) int { return len(union) + tupleLen(u.cols, present, r) },
		func(dst []byte, r sluice.Row) []byte {
			dst = append(dst, union...)
			for i, c := range present {
				if i > 0 {
					dst = append(dst, ", "...)
				}
				dst = appendValue(dst, u.cols[i].Kind, r[c])
			}
			return dst
		})
	if err != nil {
		return nil, nil, nil, err
	}
	key := make([]sqlColumn, len(u.key))
	at := make([]int, len(u.key)) // the key's values in a row
	for i, k := range u.key {
		key[i], at[i] = u.cols[k], present[k]
	}
	off := 0
	for _, n := range counts {
		var b strings.Builder
		b.WriteString("SELECT IF((SELECT COUNT(*) FROM ")
		b.WriteString(u.table)
		b.WriteString(" WHERE ")
		if len(key) > 1 {
			b.WriteByte('(')
		}
		for i, c := range key {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteIdent(c.Name))
		}
		if len(key) > 1 {
			b.WriteByte(')')
		}
		b.WriteString(" IN (")
		for j, r := range rows[off : off+n] {
			if j > 0 {
				b.WriteString(", ")
			}
			if len(key) == 1 {
				writeValue(&b, key[0].Kind, r[at[0]])
			} else {
				writeTuple(&b, key, at, r)
			}
		}
		b.WriteString(")) = ")
		b.WriteString(strconv.Itoa(n))
		b.WriteString(", 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_found")
		checks = append(checks, b.String())
		off += n
	}
	return updates, checks, counts, nil
}

// isCharsetName reports whether s is a plain character set or collation
// name (letters, digits, underscores), safe to write bare.
func isCharsetName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// buildDeletes returns the statements that delete the rows with the given
// primary keys (aligned with key): DELETE FROM t WHERE k IN (…) for a single
// column key, WHERE (k1, k2) IN ((…), …) for a composite one.
func buildDeletes(table string, key []sqlColumn, keys []sluice.Row, limit int) ([]string, []int, error) {
	var h strings.Builder
	h.WriteString("DELETE FROM ")
	h.WriteString(table)
	h.WriteString("\nWHERE ")
	if len(key) == 1 {
		h.WriteString(quoteIdent(key[0].Name))
	} else {
		h.WriteByte('(')
		for i, c := range key {
			if i > 0 {
				h.WriteString(", ")
			}
			h.WriteString(quoteIdent(c.Name))
		}
		h.WriteByte(')')
	}
	h.WriteString(" IN (")
	all := make([]int, len(key))
	for i := range all {
		all[i] = i
	}
	if len(key) == 1 {
		return buildRows(h.String(), ", ", ")", keys, limit,
			func(r sluice.Row) int { return valueLen(key[0].Kind, r[0]) },
			func(dst []byte, r sluice.Row) []byte { return appendValue(dst, key[0].Kind, r[0]) })
	}
	return buildRows(h.String(), ", ", ")", keys, limit,
		func(r sluice.Row) int { return tupleLen(key, all, r) },
		func(dst []byte, r sluice.Row) []byte { return appendTuple(dst, key, all, r) })
}

// buildRelease returns the statements that set the columns cols (the
// columns of the table's nullable unique secondary indexes) to NULL in the
// rows with the given primary keys whose unique values are about to change,
// so that no other row of the batch collides with a value they give up.
// newVals holds each row's final values of cols, aligned with keys. A row
// whose unique values do not change is not touched (NULL-safe comparison).
func buildRelease(table string, key []sqlColumn, cols []sqlColumn, keys, newVals []sluice.Row, limit int) ([]string, []int, error) {
	var h strings.Builder
	h.WriteString("UPDATE ")
	h.WriteString(table)
	h.WriteString(" SET ")
	for i, c := range cols {
		if i > 0 {
			h.WriteString(", ")
		}
		h.WriteString(quoteIdent(c.Name))
		h.WriteString(" = NULL")
	}
	h.WriteString("\nWHERE ")
	// One row per term: (pk = k AND NOT (u1 <=> v1 AND u2 <=> v2)), which
	// the range optimizer turns into primary-key lookups.
	rows := make([]sluice.Row, len(keys))
	for i := range keys {
		rows[i] = append(append(sluice.Row(nil), keys[i]...), newVals[i]...)
	}
	// The names are quoted once, not per row.
	keyNames := make([]string, len(key))
	for i, c := range key {
		keyNames[i] = quoteIdent(c.Name)
	}
	colNames := make([]string, len(cols))
	for i, c := range cols {
		colNames[i] = quoteIdent(c.Name)
	}
	size := func(r sluice.Row) int {
		n := 16
		for i, c := range key {
			n += len(keyNames[i]) + 8 + valueLen(c.Kind, r[i])
		}
		for i, c := range cols {
			n += len(colNames[i]) + 10 + valueLen(c.Kind, r[len(key)+i])
		}
		return n
	}
	write := func(dst []byte, r sluice.Row) []byte {
		dst = append(dst, '(')
		for i, c := range key {
			if i > 0 {
				dst = append(dst, " AND "...)
			}
			dst = append(dst, keyNames[i]...)
			dst = append(dst, " = "...)
			dst = appendValue(dst, c.Kind, r[i])
		}
		dst = append(dst, " AND NOT ("...)
		for i, c := range cols {
			if i > 0 {
				dst = append(dst, " AND "...)
			}
			dst = append(dst, colNames[i]...)
			dst = append(dst, " <=> "...)
			dst = appendValue(dst, c.Kind, r[len(key)+i])
		}
		return append(dst, "))"...)
	}
	return buildRows(h.String(), "\n OR ", "", rows, limit, size, write)
}

// buildRows writes rows between head and tail, separated by sep, starting a
// new statement whenever the next row would take one past limit bytes.
// size is at least the length of what write appends for a row (a
// statement is allocated once, at the size they add up to).
func buildRows(head, sep, tail string, rows []sluice.Row, limit int,
	size func(sluice.Row) int, write func([]byte, sluice.Row) []byte) ([]string, []int, error) {
	var stmts []string
	var counts []int
	fixed := len(head) + len(tail)
	for i := 0; i < len(rows); {
		n := fixed
		j := i
		for j < len(rows) {
			s := size(rows[j])
			if j > i {
				s += len(sep)
			}
			if n+s > limit && j > i {
				break
			}
			n += s
			j++
		}
		if limit > 0 && n > limit {
			return nil, nil, errRowTooBig
		}
		buf := make([]byte, 0, n)
		buf = append(buf, head...)
		for k := i; k < j; k++ {
			if k > i {
				buf = append(buf, sep...)
			}
			buf = write(buf, rows[k])
		}
		buf = append(buf, tail...)
		stmts = append(stmts, bytesString(buf))
		counts = append(counts, j-i)
		i = j
	}
	return stmts, counts, nil
}

// bytesString returns b as a string without copying it, as
// strings.Builder.String does: b must not be written after (a statement's
// buffer is written once, then only read). Rows are written into a []byte
// in a local variable rather than a strings.Builder, whose buffer is a
// field behind a pointer: each of a row's dozen or so writes then cost a
// GC write barrier while a collection runs, a fifth of the time it takes
// to write a batch's upserts.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// checkpointTable is sluice's table in the target database: one row per
// stream and lane.
const checkpointTable = "sluice_checkpoint"

// checkpointDDL creates the checkpoint table.
const checkpointDDL = "CREATE TABLE IF NOT EXISTS `" + checkpointTable + "` (\n" +
	"\t`stream` VARCHAR(255) NOT NULL,\n" +
	"\t`lane` INT NOT NULL DEFAULT 0,\n" +
	"\t`seq` BIGINT UNSIGNED NOT NULL,\n" +
	"\t`position` TEXT NOT NULL,\n" +
	"\t`applied` BIGINT UNSIGNED NOT NULL,\n" +
	"\t`updated_at` DATETIME(6) NOT NULL,\n" +
	"\t`last_position` TEXT NULL,\n" +
	"\t`lanes` INT NULL,\n" +
	"\t`routing` TEXT NULL,\n" +
	"\tPRIMARY KEY (`stream`, `lane`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

// checkpointHasLanes tells whether the checkpoint table has the lane
// column: one made by a sluice before lanes kept rows of their own has not.
const checkpointHasLanes = "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" +
	checkpointTable + "' AND COLUMN_NAME = 'lane'"

// checkpointUpgrade brings such a table to the new shape: its row becomes
// lane 0's, with lanes NULL (written before lanes kept their own).
const checkpointUpgrade = "ALTER TABLE `" + checkpointTable + "` ADD COLUMN `lane` INT NOT NULL DEFAULT 0 AFTER `stream`, " +
	"ADD COLUMN `last_position` TEXT NULL, ADD COLUMN `lanes` INT NULL, ADD COLUMN `routing` TEXT NULL, " +
	"DROP PRIMARY KEY, ADD PRIMARY KEY (`stream`, `lane`)"

// buildCheckpointUpsert returns the statement recording cp in its lane's
// row. A zero time records the server's clock.
func buildCheckpointUpsert(cp sluice.Checkpoint) string {
	var b strings.Builder
	b.WriteString("INSERT INTO `" + checkpointTable + "` (`stream`, `lane`, `seq`, `position`, `applied`, `updated_at`, `last_position`, `lanes`, `routing`)\nVALUES (")
	quoteString(&b, cp.Stream)
	fmt.Fprintf(&b, ", %d, %d, ", cp.Lane, cp.Seq)
	quoteString(&b, cp.Position.String())
	fmt.Fprintf(&b, ", %d, ", cp.Applied)
	if cp.Time.IsZero() {
		b.WriteString("UTC_TIMESTAMP(6)")
	} else {
		quoteString(&b, cp.Time.UTC().Format("2006-01-02 15:04:05.000000"))
	}
	b.WriteString(", ")
	last := cp.Last
	if last.IsZero() {
		last = cp.Position
	}
	quoteString(&b, last.String())
	fmt.Fprintf(&b, ", %d, ", max(cp.Lanes, 1))
	if cp.Routing == "" {
		b.WriteString("NULL")
	} else {
		quoteString(&b, cp.Routing)
	}
	b.WriteString(")\nON DUPLICATE KEY UPDATE `seq` = VALUES(`seq`), `position` = VALUES(`position`), " +
		"`applied` = VALUES(`applied`), `updated_at` = VALUES(`updated_at`), `last_position` = VALUES(`last_position`), " +
		"`lanes` = VALUES(`lanes`), `routing` = VALUES(`routing`)")
	return b.String()
}

func buildCheckpointSelect(stream string) string {
	var b strings.Builder
	b.WriteString("SELECT `lane`, `seq`, `position`, `applied`, `updated_at`, COALESCE(`last_position`, ''), COALESCE(`lanes`, 0), COALESCE(`routing`, '') FROM `" +
		checkpointTable + "` WHERE `stream` = ")
	quoteString(&b, stream)
	b.WriteString(" ORDER BY `lane`")
	return b.String()
}

// buildKeyChange returns the statement that updates the row at old in
// place to the present columns of img, primary key included, and the
// check that follows it: when no row had the old key, the target differs
// from the source, and the check fails (a subquery returning two rows,
// error 1242, which the target turns into an error saying so) rather than
// letting the change pass in silence.
func buildKeyChange(table string, key []sqlColumn, cols []sqlColumn, present []int, old, img sluice.Row) (update, check string) {
	var b strings.Builder
	b.WriteString("UPDATE ")
	b.WriteString(table)
	b.WriteString(" SET ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c.Name))
		b.WriteString(" = ")
		writeValue(&b, c.Kind, img[present[i]])
	}
	b.WriteString(" WHERE ")
	for i, c := range key {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(quoteIdent(c.Name))
		b.WriteString(" = ")
		writeValue(&b, c.Kind, old[i])
	}
	return b.String(), keyChangeCheck
}

// keyChangeCheck fails unless the statement right before it changed one
// row, with error 1242 (Subquery returns more than 1 row), which it raises
// itself: MySQL has no SIGNAL outside stored programs, and a statement of
// a multi-statement packet must fail for the packet to stop. (DO would
// swallow the subquery's error; SELECT … INTO does not, and returns no
// result set.) The key change's error says so (stepError).
const keyChangeCheck = "SELECT IF(ROW_COUNT() = 1, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_moved"

// buildTruncate empties a table inside the batch's transaction: TRUNCATE
// would commit it implicitly.
func buildTruncate(table string) string { return "DELETE FROM " + table }
