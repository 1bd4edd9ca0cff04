package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// sqlColumn is a target column as the SQL builder needs it: its name and the
// type its text values are cast to.
type sqlColumn struct {
	Name string
	// TypeSchema and TypeName name the pg_type row of the cast, e.g.
	// pg_catalog and int8, or pg_catalog and _text for text[]. The cast is
	// written as a quoted qualified identifier, never with a typmod: an
	// explicit cast to varchar(5) or numeric(10,2) would silently truncate or
	// round, where the assignment to the column raises an error we want to
	// see. Quoting also sidesteps the grammar's special cases ("character"
	// and "bit" without a length mean length 1).
	TypeSchema string
	TypeName   string
	// Param is the array type the column's values travel in (see
	// paramKind): text, cast by the statement, unless set.
	Param paramKind
}

func (c sqlColumn) cast() string {
	return pgx.Identifier{c.TypeSchema, c.TypeName}.Sanitize()
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// buildUpsert returns the statement that upserts rows passed column-wise, one
// array parameter per column (text[], or an integer array for an integer
// column; see paramKind), so the statement has the same parameters
// whatever the row count. The server casts each text element with the
// column type's own input function. key holds the indexes in cols of the conflict
// target (the primary key). Columns outside cols are the ones the target
// generates: rows with values the source did not send are updated in
// place (buildUpdate).
func buildUpsert(table string, cols []sqlColumn, key []int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (")
	writeNames(&b, cols, "")
	b.WriteString(")\nSELECT ")
	writeCasts(&b, cols)
	b.WriteString("\nFROM unnest(")
	writeParams(&b, cols)
	b.WriteString(") AS u(")
	writeNames(&b, cols, "")
	b.WriteString(")\nON CONFLICT (")
	for i, k := range key {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ident(cols[k].Name))
	}
	b.WriteString(") DO ")
	isKey := make([]bool, len(cols))
	for _, k := range key {
		isKey[k] = true
	}
	first := true
	for i, c := range cols {
		if isKey[i] {
			continue
		}
		if first {
			b.WriteString("UPDATE SET ")
			first = false
		} else {
			b.WriteString(", ")
		}
		n := ident(c.Name)
		b.WriteString(n)
		b.WriteString(" = EXCLUDED.")
		b.WriteString(n)
	}
	if first {
		// Every present column is a key column: the row is already right.
		b.WriteString("NOTHING")
	}
	return b.String()
}

// buildUpdate returns the statement that updates, in place, rows passed
// column-wise as buildUpsert's that carry only the columns cols: the
// source left the others unsent (its unchanged TOASTed values), so the
// rows cannot be inserted, and an upsert would not do either: PostgreSQL
// checks NOT NULL and CHECK constraints on the row an INSERT proposes
// before it finds the conflict. key holds the indexes in cols of the
// primary key, whose values the rows keep. When fewer rows are updated
// than passed, some are not on the target, which then differs from the
// source, and the statement fails (division by zero, which the target
// turns into an error saying so) rather than passing over them.
func buildUpdate(table string, cols []sqlColumn, key []int) string {
	isKey := make([]bool, len(cols))
	for _, k := range key {
		isKey[k] = true
	}
	var b strings.Builder
	b.WriteString("WITH w AS (UPDATE ")
	b.WriteString(table)
	b.WriteString(" AS t SET ")
	first := true
	for i, c := range cols {
		if isKey[i] {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString(ident(c.Name))
		b.WriteString(" = u.")
		b.WriteString(ident(c.Name))
		b.WriteString("::")
		b.WriteString(c.cast())
	}
	if first {
		// Only the key was sent: the row is right once it is there.
		n := ident(cols[key[0]].Name)
		b.WriteString(n)
		b.WriteString(" = t.")
		b.WriteString(n)
	}
	b.WriteString("\nFROM unnest(")
	writeParams(&b, cols)
	b.WriteString(") AS u(")
	writeNames(&b, cols, "")
	b.WriteString(")\nWHERE ")
	for i, k := range key {
		if i > 0 {
			b.WriteString(" AND ")
		}
		n := ident(cols[k].Name)
		b.WriteString("t.")
		b.WriteString(n)
		b.WriteString(" = u.")
		b.WriteString(n)
		b.WriteString("::")
		b.WriteString(cols[k].cast())
	}
	b.WriteString("\nRETURNING 1)\nSELECT 1 / (count(*) = cardinality($1::")
	b.WriteString(cols[0].Param.sqlType())
	b.WriteString("))::int FROM w")
	return b.String()
}

// buildDelete returns the statement that deletes the rows whose keys are
// passed column-wise, one array parameter per key column (as buildUpsert's).
func buildDelete(table string, key []sqlColumn) string {
	var b strings.Builder
	b.WriteString("DELETE FROM ")
	b.WriteString(table)
	b.WriteString("\nWHERE ")
	if len(key) == 1 {
		b.WriteString(ident(key[0].Name))
	} else {
		b.WriteByte('(')
		writeNames(&b, key, "")
		b.WriteByte(')')
	}
	b.WriteString(" IN (SELECT ")
	writeCasts(&b, key)
	b.WriteString(" FROM unnest(")
	writeParams(&b, key)
	b.WriteString(") AS u(")
	writeNames(&b, key, "")
	b.WriteString("))")
	return b.String()
}

// buildKeyChange returns the statement that updates one row in place,
// primary key included: the row at the old key (parameters after the
// columns', one per key column) takes the present columns' values (one
// parameter each). Columns outside cols keep what the target has, which is
// how a key change keeps values the source did not send. When no row is at
// the old key the target differs from the source, and the statement fails
// (division by zero, which the target turns into an error saying so)
// rather than changing nothing in silence.
func buildKeyChange(table string, cols, key []sqlColumn) string {
	var b strings.Builder
	b.WriteString("WITH u AS (UPDATE ")
	b.WriteString(table)
	b.WriteString(" SET ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ident(c.Name))
		b.WriteString(" = $")
		b.WriteString(itoa(i + 1))
		b.WriteString("::text::")
		b.WriteString(c.cast())
	}
	b.WriteString("\nWHERE ")
	for i, c := range key {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(ident(c.Name))
		b.WriteString(" = $")
		b.WriteString(itoa(len(cols) + i + 1))
		b.WriteString("::text::")
		b.WriteString(c.cast())
	}
	b.WriteString("\nRETURNING 1)\nSELECT 1 / count(*) FROM u")
	return b.String()
}

// buildTruncate returns the statement that empties a table, as the source's
// TRUNCATE did. It is transactional on PostgreSQL and runs inside the
// batch's transaction.
func buildTruncate(table string) string { return "TRUNCATE " + table }

// checkpointColumns are the checkpoint table's columns in the order
// buildCheckpointUpsert takes them as parameters.
const checkpointColumns = "stream, lane, seq, position, applied, updated_at, last_position, lanes, routing"

// buildCheckpointUpsert returns the statement that records a lane's
// checkpoint; its parameters are stream, lane, seq, position, applied,
// updated_at, last_position, lanes, routing.
func buildCheckpointUpsert(schema string) string {
	return "INSERT INTO " + pgx.Identifier{schema, "checkpoint"}.Sanitize() +
		" (" + checkpointColumns + ")\n" +
		"VALUES ($1, $2::integer, $3::bigint, $4, $5::bigint, coalesce($6::timestamptz, now()), $7, $8::integer, $9)\n" +
		"ON CONFLICT (stream, lane) DO UPDATE SET seq = EXCLUDED.seq, position = EXCLUDED.position, " +
		"applied = EXCLUDED.applied, updated_at = EXCLUDED.updated_at, last_position = EXCLUDED.last_position, " +
		"lanes = EXCLUDED.lanes, routing = EXCLUDED.routing"
}

// buildCheckpointDDL returns the statements that create sluice's own schema
// and checkpoint table, one row per stream and lane, and bring a table
// created by an earlier sluice (one row per stream) to that shape: its row
// becomes lane 0's, with lanes NULL, which says the row comes from before
// lanes kept checkpoints of their own.
func buildCheckpointDDL(schema string) []string {
	s := ident(schema)
	tbl := pgx.Identifier{schema, "checkpoint"}.Sanitize()
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + s,
		"CREATE TABLE IF NOT EXISTS " + tbl + " (\n" +
			"\tstream text NOT NULL,\n" +
			"\tlane integer NOT NULL DEFAULT 0,\n" +
			"\tseq bigint NOT NULL,\n" +
			"\tposition text NOT NULL,\n" +
			"\tapplied bigint NOT NULL,\n" +
			"\tupdated_at timestamptz NOT NULL,\n" +
			"\tlast_position text,\n" +
			"\tlanes integer,\n" +
			"\trouting text,\n" +
			"\tPRIMARY KEY (stream, lane)\n" +
			")",
		"DO $$\nBEGIN\n" +
			"\tIF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = " + quoteLiteral(tbl) + "::regclass AND attname = 'lane' AND NOT attisdropped) THEN\n" +
			"\t\tALTER TABLE " + tbl + " ADD COLUMN lane integer NOT NULL DEFAULT 0, ADD COLUMN last_position text,\n" +
			"\t\t\tADD COLUMN lanes integer, ADD COLUMN routing text;\n" +
			"\t\tEXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', " + quoteLiteral(tbl) + ",\n" +
			"\t\t\t(SELECT conname FROM pg_constraint WHERE conrelid = " + quoteLiteral(tbl) + "::regclass AND contype = 'p'));\n" +
			"\t\tALTER TABLE " + tbl + " ADD PRIMARY KEY (stream, lane);\n" +
			"\tEND IF;\n" +
			"END $$",
	}
}

func buildCheckpointSelect(schema string) string {
	return "SELECT lane, seq, position, applied, updated_at, coalesce(last_position, ''), coalesce(lanes, 0), coalesce(routing, '') FROM " +
		pgx.Identifier{schema, "checkpoint"}.Sanitize() + " WHERE stream = $1 ORDER BY lane"
}

func writeNames(b *strings.Builder, cols []sqlColumn, prefix string) {
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefix)
		b.WriteString(ident(c.Name))
	}
}

func writeCasts(b *strings.Builder, cols []sqlColumn) {
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("u.")
		b.WriteString(ident(c.Name))
		b.WriteString("::")
		b.WriteString(c.cast())
	}
}

func writeParams(b *strings.Builder, cols []sqlColumn) {
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(itoa(i + 1))
		b.WriteString("::")
		b.WriteString(c.Param.sqlType())
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}

// textArray renders values as a PostgreSQL text[] literal. Every element is
// double-quoted (so that commas, braces, blanks and the word NULL inside a
// value stay data) except SQL NULLs, which are the bare word NULL. An
// element that is itself an array's text form, like {a,"b c"}, travels as
// one quoted element and is parsed by the per-column cast.
func textArray(b *strings.Builder, vals []string, nulls []bool) {
	b.WriteByte('{')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		if nulls != nil && nulls[i] {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		for j := 0; j < len(v); j++ {
			if c := v[j]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
}
