package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// readUntilErr reads until Read fails and returns the changes read before
// (progress markers dropped) and the error.
func readUntilErr(t testing.TB, r *Reader) ([]sluice.Change, error) {
	t.Helper()
	var got []sluice.Change
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		cs, err := r.Read(context.Background(), 100)
		got = append(got, dbtest.WithoutProgress(cs)...)
		if err != nil {
			return got, err
		}
	}
	t.Fatalf("no error after %d changes: %s", len(got), summary(got))
	return nil, nil
}

// hexBytes is a MySQL hex literal of the bytes from..to.
func hexBytes(from, to int) string {
	var b strings.Builder
	b.WriteString("x'")
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%02x", i)
	}
	return b.String() + "'"
}

// TestCharsetsConverted: the row images hold each character column's
// bytes in its own character set; the reader must carry the same text the
// server gives a utf8mb4 connection (latin1 as the server's Windows-1252,
// every byte of it), and fill in the columns' collations.
func TestCharsetsConverted(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, `CREATE TABLE cs (
		id INT PRIMARY KEY,
		l1 VARCHAR(300) CHARACTER SET latin1, c1 CHAR(5) CHARACTER SET latin1, t1 TEXT CHARACTER SET latin1 COLLATE latin1_bin,
		a1 VARCHAR(200) CHARACTER SET ascii, u3 VARCHAR(50) CHARACTER SET utf8mb3, u4 VARCHAR(50) CHARACTER SET utf8mb4,
		bn VARBINARY(300), e1 ENUM('é','€uro','x') CHARACTER SET latin1, s1 SET('ä','b') CHARACTER SET latin1, js JSON
	) DEFAULT CHARSET=utf8mb4`)
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "cs")}}, sluice.Position{})
	wantColl := map[string]string{"id": "", "l1": "latin1_swedish_ci", "c1": "latin1_swedish_ci", "t1": "latin1_bin",
		"a1": "ascii_general_ci", "u3": "utf8mb3_general_ci", "u4": "utf8mb4_general_ci", "bn": "", "e1": "latin1_swedish_ci",
		"s1": "latin1_swedish_ci", "js": "utf8mb4_bin"}
	checkColl := func(what string, tb *sluice.Table) {
		t.Helper()
		for _, c := range tb.Columns {
			want, ok := wantColl[c.Name]
			if !ok {
				t.Fatalf("%s: unexpected column %s", what, c.Name)
			}
			if c.Collation != want {
				t.Errorf("%s: column %s collation %q, want %q", what, c.Name, c.Collation, want)
			}
		}
	}
	checkColl("Tables()", r.Tables()[0])
	dbtest.ExecSQL(t, db,
		"INSERT INTO cs (id, l1, t1, bn) VALUES (1, "+hexBytes(0, 255)+", "+hexBytes(1, 255)+", "+hexBytes(0, 255)+")",
		"INSERT INTO cs VALUES (2, 'àé€ŸŽ', 'àé€', 'Größe €5', ' ~azAZ09!', 'héllo ✓', '😀 ü', x'00ff80', '€uro', 'ä,b', '{\"k\": \"ü€\"}')",
		"INSERT INTO cs (id, l1, e1) VALUES (3, CONCAT('plain ascii ', REPEAT('x', 10)), 'é')",
		"ALTER TABLE cs ADD COLUMN l2 VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_general_ci",
		"INSERT INTO cs (id, l2) VALUES (4, '€€')")
	// The ADD COLUMN is a schema change among them.
	cs := slices.DeleteFunc(readN(t, r, 5, true), func(c sluice.Change) bool { return c.Op == sluice.OpSchema })
	rows, err := db.Query("SELECT * FROM cs ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for n := 0; rows.Next(); n++ {
		raw := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		c := cs[n]
		for i, col := range cols {
			if i >= len(c.Row) {
				continue // l2 of the rows before ADD COLUMN
			}
			got := c.Row[i]
			if raw[i] == nil {
				if !got.Null {
					t.Errorf("row %d %s: got %q, want NULL", n+1, col, got.Text)
				}
				continue
			}
			if got.Text != string(raw[i]) {
				t.Errorf("row %d %s: got %q, want %q", n+1, col, got.Text, raw[i])
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantColl["l2"] = "latin1_general_ci"
	if cs[3].Table == r.Tables()[0] {
		t.Fatal("after ADD COLUMN the change still has the table described at Open")
	}
	checkColl("after ADD COLUMN", cs[3].Table)
}

// TestCharsetRefused: a character set the reader does not convert is
// refused when it opens, naming table, column, character set and fix;
// one that appears later in a table map stops the stream the same way;
// bytes an ascii column cannot hold stop it instead of becoming '?'.
func TestCharsetRefused(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE l2 (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET latin2, w VARCHAR(20) CHARACTER SET cp1251)",
		"CREATE TABLE ok (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET utf8mb4)",
		"CREATE TABLE asc1 (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET ascii)")
	_, err := Open(context.Background(), d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "ok"), tn(dbn, "l2")}}, sluice.Position{})
	if err == nil {
		t.Fatal("Open accepted a latin2 column")
	}
	for _, want := range []string{dbn + ".l2 column v", "latin2", dbn + ".l2 column w", "cp1251", "utf8mb4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error lacks %q: %v", want, err)
		}
	}
	if tbl, ok := sluice.ErrTable(err); !ok || tbl != tn(dbn, "l2") {
		t.Errorf("Open error names table %v %v", tbl, ok)
	}
	t.Logf("Open: %v", err)

	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "ok"), tn(dbn, "asc1")}}, sluice.Position{})
	dbtest.ExecSQL(t, db, "INSERT INTO ok VALUES (1, 'x')",
		"ALTER TABLE ok MODIFY v VARCHAR(20) CHARACTER SET latin2", "INSERT INTO ok VALUES (2, 'y')")
	got, err := readUntilErr(t, r)
	if len(got) != 2 || describe(got[0]) != "insert ok key=[] row=[1 x]" || got[1].Op != sluice.OpSchema {
		t.Errorf("before the latin2 table map: %s", summary(got))
	}
	for _, want := range []string{dbn + ".ok column v", "latin2", "utf8mb4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stream error lacks %q: %v", want, err)
		}
	}
	t.Logf("stream: %v", err)

	r2 := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "asc1")}}, sluice.Position{})
	dbtest.ExecSQL(t, db, "SET SESSION sql_mode = ''; INSERT INTO asc1 VALUES (1, x'4180'); SET SESSION sql_mode = DEFAULT")
	got, err = readUntilErr(t, r2)
	if len(got) != 0 || !strings.Contains(err.Error(), dbn+".asc1 column v") || !strings.Contains(err.Error(), "0x80") {
		t.Errorf("ascii column holding 0x80: %s; %v", summary(got), err)
	}
	t.Logf("ascii: %v", err)
}
