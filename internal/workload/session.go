package workload

import (
	"context"
	"fmt"
	"strings"
)

// SessionForm is how a MySQL-family session logs its writes in the
// binlog, whatever the server's global settings: a bulk job may log
// partial row images to shrink its binlog, or statements. The binlog
// reader must stop at the first such event of a streamed table (naming
// it); a trigger source sees full rows whatever the session logs.
type SessionForm string

const (
	// FullRows is the server's own setting (ROW, FULL) in the harness.
	FullRows SessionForm = ""
	// NoBlob leaves out BLOB and TEXT columns (JSON too: a LONGTEXT on
	// MariaDB) from the before image, and from the after image where the
	// statement did not set them.
	NoBlob SessionForm = "NOBLOB"
	// Minimal logs the key in the before image and the columns set in the
	// after image.
	Minimal SessionForm = "MINIMAL"
	// Statement logs the SQL text.
	Statement SessionForm = "STATEMENT"
	// Mixed logs SQL text for statements safe to replay as text, which
	// every statement of the workload is.
	Mixed SessionForm = "MIXED"
)

// SessionForms lists the forms other than FullRows.
var SessionForms = []SessionForm{NoBlob, Minimal, Statement, Mixed}

// ParseSessionForm reads a form's name, any case ("none" or "" for
// FullRows).
func ParseSessionForm(s string) (SessionForm, error) {
	u := SessionForm(strings.ToUpper(strings.TrimSpace(s)))
	if u == "" || u == "NONE" || u == "FULL" {
		return FullRows, nil
	}
	for _, f := range SessionForms {
		if u == f {
			return f, nil
		}
	}
	return "", fmt.Errorf("workload: session form %q: want none, noblob, minimal, statement or mixed", s)
}

func (f SessionForm) String() string {
	if f == FullRows {
		return "full rows"
	}
	return f.Setting()
}

// Setting is the session variable and value, as the binlog reader's error
// names it.
func (f SessionForm) Setting() string {
	switch f {
	case NoBlob, Minimal:
		return "binlog_row_image=" + string(f)
	case Statement, Mixed:
		return "binlog_format=" + string(f)
	}
	return ""
}

// assignments sets the session's form, and back to the server's.
func (f SessionForm) assignments() (set, reset string) {
	switch f {
	case NoBlob, Minimal:
		return "binlog_row_image = '" + string(f) + "'", "binlog_row_image = DEFAULT"
	case Statement, Mixed:
		return "binlog_format = '" + string(f) + "'", "binlog_format = DEFAULT"
	}
	return "", ""
}

// ApplyInSession runs txs as Apply does, on a MySQL-family source, in a
// session that logs them in form f.
func (w *Workload) ApplyInSession(ctx context.Context, db DB, txs []Tx, f SessionForm) error {
	if db.My == nil {
		return fmt.Errorf("workload: session form %s needs a MySQL-family source", f)
	}
	return w.applyMy(ctx, db.My, txs, f)
}

// FirstLoggedAs returns the index of the first transaction, at from or
// after, whose first statement a session of form f surely logs without
// its full rows: any statement for Statement and Mixed; for NoBlob an
// update or delete of a table with a BLOB, TEXT or JSON column, for
// Minimal an update or delete of a table with a column outside its key,
// or an insert that leaves a column out — where the update changes the
// row, since the server logs no row an update leaves as it was. The
// binlog reader must stop at that statement, before anything of its
// transaction. It returns -1 when no transaction qualifies.
func (w *Workload) FirstLoggedAs(f SessionForm, from int) int {
	if f == FullRows {
		return -1
	}
	rows := map[string]map[string][]any{} // table → key → row, before each transaction
	for i, tx := range w.Txs {
		if i >= from && len(tx.Stmts) > 0 && loggedPartly(f, tx.Stmts[0], rows) {
			return i
		}
		for _, s := range tx.Stmts {
			replayStmt(rows, s)
		}
	}
	return -1
}

func loggedPartly(f SessionForm, s Stmt, rows map[string]map[string][]any) bool {
	switch f {
	case Statement, Mixed:
		return true
	}
	t := s.Table
	switch s.Op {
	case Insert:
		return f == Minimal && len(s.Cols) < len(t.Columns)
	case Update:
		if !changesRow(s, rows[t.Name][keyString(s.Key)]) {
			return false
		}
	}
	for i, c := range t.Columns {
		switch {
		case f == Minimal && !t.isKey(i):
			return true
		case f == NoBlob && (c.Type == LongText || c.Type == Bytes || c.Type == JSON):
			return true
		}
	}
	return false
}

// changesRow reports whether an update surely changes the row it finds:
// it moves the key, or sets a NULL to a value or back, or another integer
// or string. (Other values are not compared: the stored form may equal
// an old value that the generator's differs from.)
func changesRow(s Stmt, old []any) bool {
	if old == nil {
		return false
	}
	for i, c := range s.Cols {
		v, o := s.Vals[i], old[c]
		if s.Table.isKey(c) && fmt.Sprint(v) != fmt.Sprint(o) {
			return true
		}
		if (v == nil) != (o == nil) {
			return true
		}
		switch v.(type) {
		case int16, int32, int64, string:
			if fmt.Sprint(v) != fmt.Sprint(o) {
				return true
			}
		}
	}
	return false
}

// replayStmt applies s to the rows, as the database does.
func replayStmt(rows map[string]map[string][]any, s Stmt) {
	t := s.Table
	m := rows[t.Name]
	if m == nil {
		m = map[string][]any{}
		rows[t.Name] = m
	}
	switch s.Op {
	case Insert:
		row := make([]any, len(t.Columns))
		for i, c := range s.Cols {
			row[c] = s.Vals[i]
		}
		m[keyString(newKey(s))] = row
	case Update:
		ks := keyString(s.Key)
		row := append([]any(nil), m[ks]...)
		if row == nil {
			row = make([]any, len(t.Columns))
		}
		for i, c := range s.Cols {
			row[c] = s.Vals[i]
		}
		delete(m, ks)
		m[keyString(newKey(s))] = row
	case Delete:
		delete(m, keyString(s.Key))
	}
}
