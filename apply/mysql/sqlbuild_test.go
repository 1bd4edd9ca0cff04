package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

var (
	update    = flag.Bool("update", false, "rewrite the golden files under testdata/")
	fuzzMaria = flag.Bool("fuzz-mariadb", false, "FuzzSQL also writes every input to MariaDB and reads it back")
)

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".sql")
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got+"\n" != string(want) {
		t.Errorf("%s changed (run go test -update if intended):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestGoldenSQL(t *testing.T) {
	one := func(stmts []string, _ []int, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(stmts, ";\n")
	}
	orders := tableIdent(sluice.TableName{Schema: "shop", Name: "orders"})
	cols := []sqlColumn{{"id", kindNumber}, {"customer", kindString}, {"total", kindNumber}, {"photo", kindBinary}, {"placed_at", kindString}}
	rows := []sluice.Row{
		row("1", "O'Brien \\ \"x\"", "12.50", "\x00\xff'", "2024-01-02 03:04:05.000000"),
		row("2", null, "-0.01", "", null),
		row("18446744073709551615", "", "1e-5", "b", "2024-01-02 03:04:05.123456"),
	}
	all := []int{0, 1, 2, 3, 4}
	lines := []sqlColumn{{"order_id", kindNumber}, {"line", kindNumber}, {"sku", kindString}}
	lineRows := []sluice.Row{row("1", "1", "a"), row("1", "2", "b")}
	up := &upsertSpec{table: orders, cols: cols, key: []int{0}}
	twoRows, _, _ := buildUpserts(up, all, rows[:2], 1<<20)
	// updates joins each update with its check.
	updates := func(updates, checks []string, _ []int, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i := range updates {
			out = append(out, updates[i], checks[i])
		}
		return strings.Join(out, ";\n")
	}
	// Rows whose customer and photo were unsent, and a string key.
	unsent := &updateSpec{table: orders, cols: []sqlColumn{cols[0], cols[2], cols[4]}, key: []int{0}, keyCharsets: make([]charset, 1)}
	docs := &updateSpec{table: "`docs`", cols: []sqlColumn{{"id", kindString}, {"n", kindNumber}}, key: []int{0},
		keyCharsets: []charset{{"latin1", "latin1_nopad_bin"}}}
	twoUpdates, _, _, _ := buildUpdates(unsent, []int{0, 2, 4}, rows[:2], 1<<20)
	cases := []struct {
		name string
		sql  string
	}{
		{"upsert_single_key", one(buildUpserts(up, all, rows, 1<<20))},
		// An image whose customer and photo were unchanged: only the present
		// columns are inserted and SET.
		{"upsert_unchanged_columns", one(buildUpserts(&upsertSpec{table: orders, cols: []sqlColumn{cols[0], cols[2], cols[4]}, key: []int{0}},
			[]int{0, 2, 4}, rows[:2], 1<<20))},
		{"upsert_composite_key", one(buildUpserts(&upsertSpec{table: "`order_lines`", cols: lines, key: []int{0, 1}}, []int{0, 1, 2}, lineRows, 1<<20))},
		{"upsert_key_only", one(buildUpserts(&upsertSpec{table: "`tags`", cols: lines[:2], key: []int{1, 0}}, []int{0, 1}, lineRows, 1<<20))},
		{"upsert_unique_guard", one(buildUpserts(&upsertSpec{table: "`order_lines`", cols: lines, key: []int{0, 1}, guard: true}, []int{0, 1, 2}, lineRows, 1<<20))},
		// A limit that fits two rows per statement.
		{"upsert_split", one(buildUpserts(up, all, rows, len(twoRows[0])+24))},
		// The same rows, which cannot be inserted: updated in place.
		{"update_unsent_columns", updates(buildUpdates(unsent, []int{0, 2, 4}, rows, 1<<20))},
		{"update_split", updates(buildUpdates(unsent, []int{0, 2, 4}, rows, len(twoUpdates[0])+8))},
		{"update_string_key", updates(buildUpdates(docs, []int{0, 1}, []sluice.Row{row("a", "1"), row("it's", "2")}, 1<<20))},
		{"update_key_only", updates(buildUpdates(&updateSpec{table: "`order_lines`", cols: lines[:2], key: []int{0, 1}, keyCharsets: make([]charset, 2)},
			[]int{0, 1}, lineRows, 1<<20))},
		{"delete_single_key", one(buildDeletes(orders, cols[:1], []sluice.Row{row("1"), row("2")}, 1<<20))},
		{"delete_composite_key", one(buildDeletes("`order_lines`", lines[:2], []sluice.Row{row("1", "1"), row("2", "7")}, 1<<20))},
		{"release_unique", one(buildRelease("`people`", []sqlColumn{{"id", kindNumber}}, []sqlColumn{{"email", kindString}, {"a", kindNumber}},
			[]sluice.Row{row("1"), row("2")}, []sluice.Row{row("x@x", "1"), row(null, "2")}, 1<<20))},
		{"upsert_odd_names", one(buildUpserts(&upsertSpec{table: tableIdent(sluice.TableName{Schema: "my `db`", Name: "tä ble"}),
			cols: []sqlColumn{{"a`b", kindNumber}, {"ü c", kindString}}, key: []int{0}}, []int{0, 1}, []sluice.Row{row("1", "x")}, 1<<20))},
		{"checkpoint_upsert", buildCheckpointUpsert(sluice.Checkpoint{Stream: "s'1", Seq: 7, Applied: 1000,
			Position: sluice.Position{Kind: "binlog", Token: "mysql-bin.000003:4"}, Time: time.Date(2026, 11, 30, 7, 0, 0, 123456000, time.UTC)})},
		{"checkpoint_upsert_now", buildCheckpointUpsert(sluice.Checkpoint{Stream: "s", Seq: 1})},
		{"checkpoint_ddl", checkpointDDL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { golden(t, c.name, c.sql) })
	}
}

// lexSQL reads SQL as the server does with NO_BACKSLASH_ESCAPES and
// without ANSI_QUOTES: it returns the statement's skeleton, with every
// quoted identifier replaced by I, every string literal by S and every hex
// literal by X, and the decoded identifiers and values in order.
func lexSQL(t *testing.T, sql string) (skeleton string, idents, values []string) {
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '`' || c == '\'':
			var v strings.Builder
			j := i + 1
			for {
				if j >= len(sql) {
					t.Fatalf("unterminated quote in %q", sql)
				}
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c {
						v.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				v.WriteByte(sql[j])
				j++
			}
			if c == '`' {
				b.WriteByte('I')
				idents = append(idents, v.String())
			} else {
				b.WriteByte('S')
				values = append(values, v.String())
			}
			i = j
		case c == 'X' && i+1 < len(sql) && sql[i+1] == '\'':
			j := strings.IndexByte(sql[i+2:], '\'')
			if j < 0 {
				t.Fatalf("unterminated hex literal in %q", sql)
			}
			raw, err := hex.DecodeString(sql[i+2 : i+2+j])
			if err != nil {
				t.Fatalf("bad hex literal in %q: %v", sql, err)
			}
			b.WriteByte('X')
			values = append(values, string(raw))
			i += 2 + j
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), idents, values
}

// FuzzSQL checks the builder and the escaper: whatever the identifiers and
// the values, the statement lexes (as the server does) into the fixed
// skeleton, the same identifiers and exactly the values sent. With
// -fuzz-mariadb every input also goes through MariaDB: the row written with
// the generated SQL reads back byte for byte.
func FuzzSQL(f *testing.F) {
	f.Add("db", "t", "id", "v", "b", "hello", []byte("\x00\xff"))
	f.Add("x`y", "``", "'", `\`, "ü", `it's \' \\' ''`, []byte("'\\"))
	f.Add("a", "b", "c", "d", "e", "\x00\\\n\r\x1a\"", []byte{})
	var db *sql.DB
	if *fuzzMaria {
		m := dbtest.Maria(f)
		name := dbtest.MariaDatabase(f)
		tg, err := Open(context.Background(), m.DSN(name), Config{})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { tg.Close(context.Background()) })
		db = tg.db
	}
	f.Fuzz(func(t *testing.T, schema, table, c1, c2, c3, text string, bin []byte) {
		if c1 == c2 || c1 == c3 || c2 == c3 {
			t.Skip("column names are distinct")
		}
		cols := []sqlColumn{{c1, kindNumber}, {c2, kindString}, {c3, kindBinary}}
		tbl := tableIdent(sluice.TableName{Schema: schema, Name: table})
		r := sluice.Row{sluice.Text("1"), sluice.Text(text), sluice.Text(string(bin))}
		stmts, _, err := buildUpserts(&upsertSpec{table: tbl, cols: cols, key: []int{0}, guard: true}, []int{0, 1, 2}, []sluice.Row{r}, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		skel, idents, values := lexSQL(t, stmts[0])
		want, _, _ := buildUpserts(&upsertSpec{table: "`S`.`T`", cols: []sqlColumn{{"A", kindNumber}, {"B", kindString}, {"C", kindBinary}}, key: []int{0}, guard: true},
			[]int{0, 1, 2}, []sluice.Row{row("1", "v", "w")}, 1<<30)
		wantSkel, _, _ := lexSQL(t, want[0])
		if skel != wantSkel {
			t.Fatalf("skeleton differs:\n%s\nwant\n%s\nsql:\n%q", skel, wantSkel, stmts[0])
		}
		if idents[0] != schema || idents[1] != table || idents[2] != c1 || idents[3] != c2 || idents[4] != c3 {
			t.Fatalf("identifiers read back as %q", idents)
		}
		if len(values) != 2 || values[0] != text || values[1] != string(bin) {
			t.Fatalf("values read back as %q, want %q, %q", values, text, bin)
		}
		del, _, _ := buildDeletes(tbl, cols[1:2], []sluice.Row{{sluice.Text(text)}}, 1<<30)
		if _, _, v := lexSQL(t, del[0]); len(v) != 1 || v[0] != text {
			t.Fatalf("delete value read back as %q", v)
		}
		if db == nil {
			return
		}
		// MariaDB: identifiers are at most 64 characters, valid UTF-8
		// without NUL, not ending in a blank; a utf8mb4 column holds valid
		// UTF-8 only.
		for _, s := range []string{schema, table, c1, c2, c3} {
			if s == "" || utf8.RuneCountInString(s) > 64 || !utf8.ValidString(s) || strings.ContainsRune(s, 0) ||
				strings.TrimRightFunc(s, unicode.IsSpace) != s || strings.ContainsRune(s, 0xFFFF) || strings.ContainsFunc(s, func(r rune) bool { return r > 0xFFFF }) {
				t.Skip("not a MariaDB identifier")
			}
		}
		if strings.EqualFold(c1, c2) || strings.EqualFold(c1, c3) || strings.EqualFold(c2, c3) {
			t.Skip("MariaDB column names are case-insensitive")
		}
		if !utf8.ValidString(text) {
			text = strings.ToValidUTF8(text, "?")
		}
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		q := quoteIdent
		exec := func(s string) {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		exec("DROP DATABASE IF EXISTS " + q(schema))
		exec("CREATE DATABASE " + q(schema) + " DEFAULT CHARSET utf8mb4")
		defer conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+q(schema))
		exec("CREATE TABLE " + tbl + " (" + q(c1) + " int PRIMARY KEY, " + q(c2) + " longtext, " + q(c3) + " longblob)")
		r[1] = sluice.Text(text)
		for range 2 { // insert, then update in place
			stmts, _, _ := buildUpserts(&upsertSpec{table: tbl, cols: cols, key: []int{0}, guard: true}, []int{0, 1, 2}, []sluice.Row{r}, 1<<30)
			exec(stmts[0])
		}
		var gotText, gotBin []byte
		if err := conn.QueryRowContext(ctx, "SELECT "+q(c2)+", "+q(c3)+" FROM "+tbl).Scan(&gotText, &gotBin); err != nil {
			t.Fatal(err)
		}
		if string(gotText) != text || string(gotBin) != string(bin) {
			t.Fatalf("read back %q, %q; want %q, %q", gotText, gotBin, text, bin)
		}
		// Any bytes at all in a string literal, read as binary.
		var raw []byte
		var lit strings.Builder
		quoteString(&lit, string(bin)+text)
		if err := conn.QueryRowContext(ctx, "SELECT _binary"+lit.String()).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if string(raw) != string(bin)+text {
			t.Fatalf("string literal read back as %q, want %q", raw, string(bin)+text)
		}
	})
}

// TestFloat32Literal: a FLOAT is written as the exact value of its
// float32, so that the server's double-then-narrow reading gives it back
// bit for bit, the largest float32 included (its shortest text,
// 3.4028235e+38, is a double past the FLOAT range).
func TestFloat32Literal(t *testing.T) {
	for in, want := range map[string]string{
		"3.4028235e+38": "3.4028234663852886e+38",
		"1234567":       "1.234567e+06",
		"0.1234567":     "0.12345670163631439",
		"1.5":           "1.5",
		"-0":            "-0",
		"1e-45":         "1.401298464324817e-45",
		"not a number":  "not a number",
	} {
		if got := float32Literal(in); got != want {
			t.Errorf("float32Literal(%q) = %q, want %q", in, got, want)
		}
	}
}
