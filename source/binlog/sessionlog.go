package binlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice"
)

// Sessions that do not log full rows. Open checks the server's global
// binlog settings, but binlog_format and binlog_row_image are also session
// variables: a job may SET SESSION binlog_row_image = NOBLOB or MINIMAL to
// shrink its binlog, or binlog_format = STATEMENT, and a server whose
// global format was changed to MIXED after Open logs the new sessions'
// writes as statements. Such events lack columns (a rows event whose
// column bitmaps leave some out: go-mysql hands the missing values out as
// NULL) or list no rows at all (a QUERY event with the SQL text). Applying
// the first would write NULL over the target's values; passing over the
// second would lose its changes. Both are silent, so the reader stops at
// the event, before any change of it, with a SessionLogError.
//
// A statement is taken to change a streamed table when its text names one
// (schema.table, or a table of the statement's default database), and
// also when it runs in, or names, a database that holds a streamed table:
// a trigger, a view or a stored function there may change one without the
// statement naming it, and the binlog does not say. A statement in another
// database that names none is followed (it is part of its transaction),
// with a warning once per database.

// SessionLogError stops the stream at an event that a session logged
// without full row images.
type SessionLogError struct {
	// Table is the streamed table the event changes; zero for a statement
	// that names none but runs in a database that holds one.
	Table sluice.TableName
	// Database holds the statement's streamed tables when Table is zero.
	Database string
	// Statement is true for a statement logged as SQL text, false for a
	// rows event with columns left out.
	Statement bool
	// At is where the event ends in the binlog (file:offset) and GTID the
	// transaction it is in (empty without GTIDs).
	At, GTID string
	// Setting is the session setting that logs events so, as far as the
	// event tells it ("binlog_row_image=NOBLOB").
	Setting string
	// Kind is the rows event's kind (insert, update, delete), Image the
	// image with columns left out ("before", "after", "") and Missing
	// their names.
	Kind, Image string
	Missing     []string
	// Query is the statement, shortened.
	Query string
}

func (e *SessionLogError) Error() string {
	var b strings.Builder
	gtid := ""
	if e.GTID != "" {
		gtid = " (transaction " + e.GTID + ")"
	}
	if e.Statement {
		what := "table " + e.Table.String()
		if e.Table == (sluice.TableName{}) {
			what = "database " + e.Database
		}
		fmt.Fprintf(&b, "binlog: %s: the statement %q ending at %s%s was logged as SQL text, not as row changes, because the session that ran it logged with %s: ",
			what, e.Query, e.At, gtid, e.Setting)
		if e.Table == (sluice.TableName{}) {
			fmt.Fprintf(&b, "it names no streamed table, but it runs in (or names) database %s, which holds streamed tables, and a trigger, view or stored function may have changed them; ", e.Database)
		}
		b.WriteString("sluice cannot tell which rows it changed, so the stream stopped at this statement and applied none of it (the checkpoint stays before it). " +
			"Fix the writer: SET SESSION binlog_format = 'ROW' in the application or job that ran it, and keep binlog_format = ROW in the server's configuration (MIXED logs statements too)")
	} else {
		fmt.Fprintf(&b, "binlog: table %s: the %s rows event ending at %s%s carries only part of each row (its %s image lacks column%s %s) because the session that wrote it logged with %s: ",
			e.Table, e.Kind, e.At, gtid, e.Image, plural(len(e.Missing)), strings.Join(e.Missing, ", "), e.Setting)
		b.WriteString("sluice never writes a row it did not fully receive, so the stream stopped at this event and applied none of it (the checkpoint stays before it). " +
			"Fix the writer: SET SESSION binlog_row_image = 'FULL' in the application or job that wrote it, and keep binlog_row_image = FULL in the server's configuration")
	}
	b.WriteString(". The event stays in the binlog, so a restart stops here again: once the writers log full rows, empty the target's tables and start the stream anew " +
		"with its initial copy (another --stream-id, or remove its checkpoint on both sides)")
	return b.String()
}

// TableOf names the table, for log lines (sluice.ErrTable).
func (e *SessionLogError) TableOf() (sluice.TableName, bool) {
	return e.Table, e.Table != (sluice.TableName{})
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// at names where the event with header h ends, for errors.
func (s *state) at(h *replication.EventHeader) string {
	file := s.curFile
	if file == "" {
		file = s.pos.file
	}
	at := fmt.Sprintf("%s:%d", file, h.LogPos)
	if s.sub > 0 {
		at += fmt.Sprintf(" (event %d of its compressed transaction)", s.sub)
	}
	return at
}

// partialRows returns a SessionLogError when the rows event leaves out
// columns of a row image. Every row of an event has the same columns
// (the event's column bitmaps), as go-mysql's SkippedColumns lists them
// per image.
func (s *state) partialRows(h *replication.EventHeader, e *replication.RowsEvent, tm *tableMap, op sluice.Op, step int) error {
	for i, skipped := range e.SkippedColumns {
		if len(skipped) == 0 {
			continue
		}
		image := "row"
		switch {
		case op == sluice.OpInsert:
			image = "after"
		case step == 2 && i%2 == 1:
			image = "after"
		default:
			image = "before"
		}
		missing := make([]string, 0, len(skipped))
		blobs := true
		for _, c := range skipped {
			if c < len(tm.defs) {
				missing = append(missing, tm.defs[c].name)
				blobs = blobs && isBlob(tm.defs[c].typ)
			} else {
				missing = append(missing, fmt.Sprintf("#%d", c+1))
				blobs = false
			}
		}
		setting := "binlog_row_image=MINIMAL"
		if blobs {
			setting = "binlog_row_image=NOBLOB"
		}
		return &SessionLogError{Table: tm.table.Name, At: s.at(h), GTID: s.txn, Setting: setting,
			Kind: op.String(), Image: image, Missing: missing}
	}
	return nil
}

// isBlob reports whether NOBLOB leaves a column of this type out (BLOB
// and TEXT of every size; JSON and GEOMETRY are stored as BLOBs).
func isBlob(typ byte) bool {
	switch typ {
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB,
		mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_GEOMETRY:
		return true
	}
	return false
}

// statement looks at a statement logged as a QUERY event. It reports
// whether the statement changes rows (a statement-based session's write,
// which a ROW-format session never logs as text) and, for one that may
// change a streamed table, returns the SessionLogError that stops the
// stream. Statements that change no rows (DDL, BEGIN, …) are left to the
// caller.
func (s *state) statement(h *replication.EventHeader, defaultDB, query string) (bool, error) {
	toks := tokenize(executableComments(query))
	if !changesRows(toks) {
		return false, nil
	}
	table, db, ok := s.r.streamedIn(toks, defaultDB)
	if !ok {
		if s.stmtWarned == nil {
			s.stmtWarned = map[string]bool{}
		}
		if !s.stmtWarned[defaultDB] {
			s.stmtWarned[defaultDB] = true
			s.r.log.Warn("binlog: a session logs its writes as SQL text (binlog_format STATEMENT or MIXED) in a database that holds no streamed table; "+
				"followed as changing none of them (said once per database)", "database", defaultDB, "statement", clip(query), "at", s.at(h))
		}
		return true, nil
	}
	return true, &SessionLogError{Table: table, Database: db, Statement: true, At: s.at(h), GTID: s.txn,
		Setting: "binlog_format=STATEMENT or MIXED", Query: clip(query)}
}

// changesRows reports whether a statement is one a statement-based
// session logs because it changed rows: INSERT, REPLACE, UPDATE, DELETE,
// LOAD DATA/XML, and the statements that may run stored code that does
// (CALL, DO, SELECT and WITH calling a function), also behind MariaDB's
// SET STATEMENT … FOR.
func changesRows(toks []token) bool {
	i := 0
	for i < len(toks) && !toks[i].quoted && toks[i].s == "(" {
		i++
	}
	if i >= len(toks) || toks[i].quoted {
		return false
	}
	switch strings.ToUpper(toks[i].s) {
	case "INSERT", "REPLACE", "UPDATE", "DELETE", "CALL", "DO", "SELECT", "WITH", "VALUES", "TABLE":
		return true
	case "LOAD":
		return i+1 < len(toks) && (strings.EqualFold(toks[i+1].s, "DATA") || strings.EqualFold(toks[i+1].s, "XML"))
	case "SET":
		if i+1 < len(toks) && strings.EqualFold(toks[i+1].s, "STATEMENT") {
			depth := 0
			for j := i + 2; j < len(toks); j++ {
				switch {
				case toks[j].quoted:
				case toks[j].s == "(":
					depth++
				case toks[j].s == ")":
					depth--
				case depth == 0 && strings.EqualFold(toks[j].s, "FOR"):
					return changesRows(toks[j+1:])
				}
			}
		}
	}
	return false
}

// streamedIn finds what a statement may change of the streamed tables: a
// streamed table it names (qualified, or in defaultDB), else a database of
// streamed tables it runs in or names. Names compare without case: a
// false match stops the stream loudly, a missed one would lose changes.
func (r *Reader) streamedIn(toks []token, defaultDB string) (sluice.TableName, string, bool) {
	word := func(i int) bool {
		return i < len(toks) && (toks[i].quoted || isIdent(toks[i].s))
	}
	dot := func(i int) bool { return i < len(toks) && !toks[i].quoted && toks[i].s == "." }
	dbs := []string{defaultDB}
	for i := range toks {
		if !word(i) {
			continue
		}
		if dot(i+1) && word(i+2) {
			dbs = append(dbs, toks[i].s)
			if t, ok := r.streamedTable(toks[i].s, toks[i+2].s); ok {
				return t, "", true
			}
		}
		if t, ok := r.streamedTable(defaultDB, toks[i].s); ok {
			return t, "", true
		}
	}
	for _, db := range dbs {
		if db != "" && r.streamedDBs()[strings.ToLower(db)] {
			return sluice.TableName{}, db, true
		}
	}
	return sluice.TableName{}, "", false
}

func isIdent(s string) bool {
	c := s[0]
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// streamedTable returns the streamed table schema.name, without case.
func (r *Reader) streamedTable(schema, name string) (sluice.TableName, bool) {
	for _, t := range r.tables {
		if strings.EqualFold(t.Name.Schema, schema) && strings.EqualFold(t.Name.Name, name) {
			return t.Name, true
		}
	}
	return sluice.TableName{}, false
}

// streamedDBs is the set of databases that hold a streamed table, in
// lower case.
func (r *Reader) streamedDBs() map[string]bool {
	if r.dbs == nil {
		r.dbs = map[string]bool{}
		for _, t := range r.tables {
			r.dbs[strings.ToLower(t.Name.Schema)] = true
		}
	}
	return r.dbs
}

// executableComments opens MySQL's executable comments (/*! … */,
// /*!50001 … */, MariaDB's /*M!100100 … */): the server runs what they
// hold, so a statement check must read it; tokenize drops comments.
func executableComments(q string) string {
	if !strings.Contains(q, "/*!") && !strings.Contains(q, "/*M!") {
		return q
	}
	var b strings.Builder
	for {
		i := strings.Index(q, "/*")
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		b.WriteString(q[:i])
		rest := q[i+2:]
		end := strings.Index(rest, "*/")
		if end < 0 {
			end = len(rest)
		}
		body := rest[:end]
		if strings.HasPrefix(body, "!") || strings.HasPrefix(body, "M!") {
			body = strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(body, "M"), "!"), "0123456789")
			b.WriteString(" " + body + " ")
		} else {
			b.WriteString(" ")
		}
		if end+2 > len(rest) {
			return b.String()
		}
		q = rest[end+2:]
	}
}

// loadQuery reads the database and the statement of an
// EXECUTE_LOAD_QUERY event (a LOAD DATA logged as a statement), which
// go-mysql decodes without them: after the common header, the post-header
// (thread id 4, time 4, database length 1, error code 2, status variables
// length 2, file id 4, start and end offsets 4 each, duplicate handling
// 1), the status variables, the database and a NUL, then the statement,
// then the CRC32 when the binlog has checksums.
func loadQuery(raw []byte) (db, query string, ok bool) {
	const header, post = replication.EventHeaderSize, 26
	if len(raw) < header+post {
		return "", "", false
	}
	d := raw[header:]
	dbLen := int(d[8])
	statusLen := int(binary.LittleEndian.Uint16(d[11:]))
	i := post + statusLen
	if i+dbLen+1 > len(d) {
		return "", "", false
	}
	db = string(d[i : i+dbLen])
	q := d[i+dbLen+1:]
	if n := len(raw); len(q) >= 4 && crc32.ChecksumIEEE(raw[:n-4]) == binary.LittleEndian.Uint32(raw[n-4:]) {
		q = q[:len(q)-4]
	}
	return db, string(q), true
}
