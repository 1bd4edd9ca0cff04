package mysql

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

// copyVariants covers multi-statement packets, one statement per round
// trip with autocommit off (the pipelined mode without multi-statements)
// and with autocommit on (PerRow without multi-statements).
var copyVariants = []variant{
	{"multi", Pipelined, nil},
	{"no-multi", Pipelined, boolp(false)},
	{"no-multi-autocommit", PerRow, boolp(false)},
}

func eachCopy(t *testing.T, f func(t *testing.T, v variant)) {
	for _, v := range copyVariants {
		t.Run(v.name, func(t *testing.T) { f(t, v) })
	}
}

// produce returns a Rows producer emitting rows in batches of n, then err.
func produce(rows []sluice.Row, n int, err error) tablecopy.Rows {
	return func(emit func([]sluice.Row) error) error {
		for i := 0; i < len(rows); i += n {
			if e := emit(rows[i:min(i+n, len(rows))]); e != nil {
				return e
			}
		}
		return err
	}
}

func chunkRecord(t *testing.T, db *sql.DB, stream, table string, n int) (done bool, rows, copies int64, ok bool) {
	t.Helper()
	err := db.QueryRow("SELECT done, `rows`, copies FROM sluice_copy_chunk WHERE stream = ? AND table_name = ? AND n = ?", stream, table, n).
		Scan(&done, &rows, &copies)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return done, rows, copies, true
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCopyPlan(t *testing.T) {
	m := dbtest.Maria(t)
	eachCopy(t, func(t *testing.T, v variant) {
		dsn, db := testDB(t, "CREATE TABLE t1 (id int PRIMARY KEY, v text)", "CREATE TABLE t2 (a int, b varchar(20), PRIMARY KEY (a, b))")
		proxied, proxy := dbtest.ViaProxy(t, dsn, m.Addr(), 0)
		tg := openTarget(t, proxied, v.mode, v.multi)
		ctx := context.Background()
		if n := count(t, db, "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'sluice_copy%'"); n != 0 {
			t.Fatalf("Open created %d plan tables", n)
		}
		proxy.ResetRoundTrips()
		p, err := tg.ReadPlan(ctx, "s")
		if err != nil || p != nil {
			t.Fatalf("ReadPlan without plan tables = %v, %v", p, err)
		}
		if n := proxy.RoundTrips(); v.name == "multi" && n != 1 {
			t.Errorf("ReadPlan without plan tables cost %d round trips, want 1", n)
		}
		t1 := sluice.TableName{Name: "t1"}
		t2 := sluice.TableName{Schema: "other", Name: "t2"}
		chunks := []tablecopy.ChunkState{
			{Chunk: tablecopy.Chunk{Table: t1, N: 0, Range: tablecopy.Range{To: row("100")}}},
			{Chunk: tablecopy.Chunk{Table: t1, N: 1, Range: tablecopy.Range{From: row("100")}}},
			{Chunk: tablecopy.Chunk{Table: t2, N: 0, Range: tablecopy.Range{To: row("5", "o'k\\ \"q\"")}}},
			{Chunk: tablecopy.Chunk{Table: t2, N: 1, Range: tablecopy.Range{From: row("5", "o'k\\ \"q\""), To: row("9")}}},
			{Chunk: tablecopy.Chunk{Table: t2, N: 2, Range: tablecopy.Range{From: row("9")}}},
		}
		plan := &tablecopy.Plan{Stream: "s", Epoch: 1, Position: sluice.Position{Kind: "binlog", Token: "mysql-bin.000001:4"}, Chunks: chunks}
		proxy.ResetRoundTrips()
		if err := tg.WritePlan(ctx, plan); err != nil {
			t.Fatal(err)
		}
		if n := proxy.RoundTrips(); v.name == "multi" && n != 1 {
			t.Errorf("WritePlan cost %d round trips, want 1", n)
		}
		got, err := tg.ReadPlan(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || got.Epoch != 1 || got.Position != plan.Position || got.Started.IsZero() || len(got.Chunks) != len(chunks) {
			t.Fatalf("ReadPlan = %+v", got)
		}
		// ReadPlan orders by table name: "other.t2" sorts before "t1".
		want := append(append([]tablecopy.ChunkState(nil), chunks[2:]...), chunks[:2]...)
		for i := range want {
			if !reflect.DeepEqual(got.Chunks[i], want[i]) {
				t.Errorf("chunk %d = %+v, want %+v", i, got.Chunks[i], want[i])
			}
		}
		started := got.Started

		// Chunk 1 of t1 is copied; then a resume writes epoch 2 with one
		// more chunk: the done record and started_at stay.
		tbl := table("t1", []int{0}, "id int", "v text")
		cs, err := tg.WriteChunk(ctx, "s", 1, tbl, chunks[1].Chunk, false, produce([]sluice.Row{row("100", "a"), row("101", "bc")}, 10, nil))
		if err != nil {
			t.Fatal(err)
		}
		if cs.Rows != 2 || cs.Bytes != 9 || cs.Copies != 1 || cs.Epoch != 1 || !cs.Done || cs.At.IsZero() {
			t.Errorf("WriteChunk = %+v", cs)
		}
		plan2 := &tablecopy.Plan{Stream: "s", Epoch: 2, Position: sluice.Position{Kind: "binlog", Token: "mysql-bin.000002:4"},
			Chunks: append(chunks, tablecopy.ChunkState{Chunk: tablecopy.Chunk{Table: t1, N: 2, Range: tablecopy.Range{From: row("200")}}})}
		if err := tg.WritePlan(ctx, plan2); err != nil {
			t.Fatal(err)
		}
		got, err = tg.ReadPlan(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if got.Epoch != 2 || got.Position != plan2.Position || !got.Started.Equal(started) || len(got.Chunks) != 6 {
			t.Fatalf("ReadPlan after epoch 2 = %+v (started %v)", got, started)
		}
		c := got.Chunks[4]
		if c.Table != t1 || c.N != 1 || !c.Done || c.Rows != 2 || c.Bytes != 9 || c.Epoch != 1 || c.Copies != 1 || !c.At.Equal(cs.At) {
			t.Errorf("done chunk after epoch 2 = %+v, want %+v", c, cs)
		}
		if c := got.Chunks[5]; c.N != 2 || c.Done {
			t.Errorf("new chunk = %+v", c)
		}
		// A copy again counts.
		cs, err = tg.WriteChunk(ctx, "s", 2, tbl, chunks[1].Chunk, true, produce([]sluice.Row{row("100", "a")}, 10, nil))
		if err != nil {
			t.Fatal(err)
		}
		if cs.Copies != 2 || cs.Epoch != 2 || cs.Rows != 1 {
			t.Errorf("second WriteChunk = %+v", cs)
		}

		if n, err := tg.RowCount(ctx, sluice.TableName{Name: "t2"}); err != nil || n != 0 {
			t.Errorf("RowCount(empty) = %d, %v", n, err)
		}
		if n, err := tg.RowCount(ctx, t1); err != nil || n < 1 {
			t.Errorf("RowCount(t1) = %d, %v", n, err)
		}

		if err := tg.ResetTable(ctx, "s", tbl); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT count(*) FROM t1"); n != 0 {
			t.Errorf("t1 has %d rows after ResetTable", n)
		}
		got, err = tg.ReadPlan(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Chunks {
			if c.Done {
				t.Errorf("chunk %v done after ResetTable", c.Chunk)
			}
		}

		if err := tg.FinishCopy(ctx, "s", plan2.Position); err != nil {
			t.Fatal(err)
		}
		var pos string
		if err := db.QueryRow("SELECT handoff_position FROM sluice_copy_plan WHERE stream = 's' AND handed_off_at IS NOT NULL").Scan(&pos); err != nil || pos != plan2.Position.String() {
			t.Errorf("hand-off = %q, %v", pos, err)
		}
		if p, err := tg.ReadPlan(ctx, "s"); err != nil || p == nil || p.HandedOff.IsZero() {
			t.Errorf("ReadPlan after FinishCopy: %+v, %v; want the hand-off time", p, err)
		}
		if err := tg.FinishCopy(ctx, "nope", plan2.Position); err == nil {
			t.Error("FinishCopy of a stream without plan succeeded")
		}
	})
}

type copyCol struct {
	name, typ string
	vals      []string // one per row; row 0 holds NULLs except id
}

// copyTypes are edge values of every type, as the binlog reader renders
// them.
var copyTypes = []copyCol{
	{"id", "int", []string{"1", "2", "3", "4", "5"}},
	{"c_tinyint", "tinyint", []string{null, "-128", "127", "0", "1"}},
	{"c_utinyint", "tinyint unsigned", []string{null, "0", "255", "7", "1"}},
	{"c_int", "int", []string{null, "-2147483648", "2147483647", "0", "1"}},
	{"c_uint", "int unsigned", []string{null, "4294967295", "0", "1", "2"}},
	{"c_bigint", "bigint", []string{null, "-9223372036854775808", "9223372036854775807", "9007199254740993", "0"}},
	{"c_ubigint", "bigint unsigned", []string{null, "18446744073709551615", "0", "9007199254740993", "1"}},
	{"c_decimal", "decimal(30,10)", []string{null, "-12345678901234567890.1234567890", "0.0000000001", "0.0000000000", "1.5000000000"}},
	{"c_udecimal", "decimal(5,2) unsigned", []string{null, "999.99", "0.00", "1.50", "0.01"}},
	{"c_float", "float", []string{null, "3.40282e+38", "-1.1", "0", "1.17549e-38"}},
	{"c_double", "double", []string{null, "0.1", "-1.7976931348623157e+308", "2.2250738585072014e-308", "5e-324"}},
	{"c_char", "char(5)", []string{null, "ab", "abcde", "", "\U0001F600"}},
	{"c_varchar", "varchar(40)", []string{null, "héllo 'q' \"dq\" \\back\\ \\' ''", "NULL", "ü€😀", ""}},
	{"c_text", "text", []string{null, "line\nnew\ttab\r\x1a \\0 \\n", "", "\\", "nul\x00byte"}},
	{"c_binary", "binary(4)", []string{null, "\x00\x01'\\", "\xff\xfe\x00\x00", "ab\x00\x00", "\x00\x00\x00\x00"}},
	{"c_varbinary", "varbinary(20)", []string{null, "\x00'\"\\\n\r\x1a\xff", "", "plain", "\x80"}},
	{"c_blob", "blob", []string{null, "\x00\x00\xc3\x28 invalid utf8 \xff", "", "'", "\\"}},
	{"c_date", "date", []string{null, "2024-02-29", "1000-01-01", "1970-01-01", "9999-12-31"}},
	{"c_datetime", "datetime(6)", []string{null, "2024-01-02 03:04:05.123456", "9999-12-31 23:59:59.999999", "1970-01-01 00:00:00.000000", "1000-01-01 00:00:00.000000"}},
	{"c_timestamp", "timestamp(6) NULL", []string{null, "2024-01-02 03:04:05.123456", "2038-01-19 03:14:07.999999", "1970-01-01 00:00:01.000000", "2000-02-29 12:00:00.500000"}},
	{"c_time", "time(6)", []string{null, "-838:59:59.000000", "838:59:59.000000", "12:34:56.789012", "00:00:00.000000"}},
	{"c_year", "year", []string{null, "2024", "1901", "0", "2155"}},
	{"c_json", "json", []string{null, `{"a": [1, 2], "b": "x\"y", "c": "\\u00e9"}`, `null`, `"NULL"`, `[]`}},
	{"c_enum", "enum('a','b c','it''s')", []string{null, "a", "b c", "it's", "a"}},
	{"c_set", "set('x','y','z')", []string{null, "x,z", "", "x,y,z", "y"}},
	{"c_bit", "bit(10)", []string{null, "\x03\xff", "\x00\x00", "\x01\x00", "\x02\x01"}},
	{"c_bool", "tinyint(1)", []string{null, "1", "0", "-1", "127"}},
}

// zeroDates are MySQL's zero dates, which the session's sql_mode accepts
// as the source had them. CompareTable cannot read them (Go's time has no
// month 0): CHECKSUM TABLE alone checks them.
var zeroDates = []copyCol{
	{"id", "int", []string{"1", "2", "3"}},
	{"c_date", "date", []string{null, "0000-00-00", "2024-00-00"}},
	{"c_datetime", "datetime(6)", []string{null, "0000-00-00 00:00:00.000000", "2024-01-00 00:00:00.000000"}},
	{"c_timestamp", "timestamp(6) NULL", []string{null, "0000-00-00 00:00:00.000000", "0000-00-00 00:00:00.000000"}},
}

// TestCopyValues copies rows with every edge value and checks the table
// against the same rows inserted by plain SQL (prepared statements: no
// literal rendering shared with sluice) and applied by the stream's path.
func TestCopyValues(t *testing.T) {
	cases := []struct {
		name    string
		cols    []copyCol
		compare bool // CompareTables can read the values
	}{
		{"types", copyTypes, true},
		{"zero-dates", zeroDates, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testCopyValues(t, tc.cols, tc.compare) })
	}
}

func testCopyValues(t *testing.T, cols []copyCol, compare bool) {
	var defs, srcCols []string
	for _, c := range cols {
		defs = append(defs, quoteIdent(c.name)+" "+c.typ)
		srcCols = append(srcCols, c.name+" "+strings.TrimSuffix(c.typ, " NULL"))
	}
	ddl := func(name string) string {
		return "CREATE TABLE " + name + " (" + strings.Join(defs, ", ") + ", PRIMARY KEY (id)) DEFAULT CHARSET=utf8mb4"
	}
	var rows []sluice.Row
	var wantBytes int64
	for r := range cols[0].vals {
		vals := make([]string, len(cols))
		for i, c := range cols {
			vals[i] = c.vals[r]
			if c.vals[r] != null {
				wantBytes += int64(len(c.vals[r]))
			}
		}
		rows = append(rows, row(vals...))
	}
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn, got := testDB(t, ddl("all_types"), ddl("applied"))
		_, want := testDB(t, ddl("all_types"))
		// The reference: prepared statements with typed parameters.
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ")
		stmt, err := want.Prepare("INSERT INTO all_types VALUES (" + marks + ")")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			args := make([]any, len(r))
			for i, val := range r {
				switch k := kindOf(parseType(cols[i].typ).Base); {
				case val.Null:
					args[i] = nil
				case k == kindBinary:
					args[i] = []byte(val.Text)
				case cols[i].typ == "year":
					n, _ := strconv.Atoi(val.Text)
					args[i] = n
				default:
					args[i] = val.Text
				}
			}
			if _, err := stmt.Exec(args...); err != nil {
				t.Fatalf("reference insert of %v: %v", r, err)
			}
		}
		stmt.Close()

		tg := openTarget(t, dsn, v.mode, v.multi)
		tbl := table("all_types", []int{0}, srcCols...)
		if err := tg.WritePlan(ctx, &tablecopy.Plan{Stream: "v", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		cs, err := tg.WriteChunk(ctx, "v", 1, tbl, tablecopy.Chunk{Table: tbl.Name}, false, produce(rows, 2, nil))
		if err != nil {
			t.Fatal(err)
		}
		if cs.Rows != int64(len(rows)) || cs.Bytes != wantBytes {
			t.Errorf("WriteChunk = %d rows %d bytes, want %d and %d", cs.Rows, cs.Bytes, len(rows), wantBytes)
		}
		if err := dbtest.CompareChecksumTable(ctx, want, got, "all_types"); err != nil {
			t.Error(err)
		}
		if compare {
			diffs, err := dbtest.CompareTables(ctx, dbtest.DB{My: want}, dbtest.DB{My: got}, "all_types")
			if err != nil {
				t.Fatal(err)
			}
			if !diffs.Equal() {
				t.Errorf("copied table differs from plain SQL:\n%s", diffs)
			}
		}
		// The stream's apply of the same rows writes the same table.
		applied := table("applied", []int{0}, srcCols...)
		var changes []sluice.Change
		for _, r := range rows {
			changes = append(changes, sluice.Change{Table: applied, Op: sluice.OpInsert, Row: r})
		}
		if err := tg.Apply(ctx, apply.Compact(changes, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		if compare {
			d, err := dbtest.CompareTableAs(ctx, dbtest.DB{My: got}, "applied", dbtest.DB{My: got}, "all_types")
			if err != nil {
				t.Fatal(err)
			}
			if !d.Equal() {
				t.Errorf("copied table differs from the applied one:\n%s", d)
			}
		}
		var a, b string
		if err := got.QueryRow("CHECKSUM TABLE applied EXTENDED").Scan(&a, &a); err != nil {
			t.Fatal(err)
		}
		if err := got.QueryRow("CHECKSUM TABLE all_types EXTENDED").Scan(&b, &b); err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("CHECKSUM TABLE: applied %s, copied %s", a, b)
		}
		if !reflect.DeepEqual(dump(t, got, "applied"), dump(t, want, "all_types")) {
			t.Errorf("text of the copied rows differs from plain SQL's")
		}
	})
}

// TestCopyChunkAtomic writes chunks larger than one statement; a failure
// anywhere — the last row, the producer, a bad value — leaves neither rows
// nor a done record, and the session works afterwards.
func TestCopyChunkAtomic(t *testing.T) {
	m := dbtest.Maria(t)
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn, db := testDB(t, "CREATE TABLE big (id int PRIMARY KEY, v varchar(200) NOT NULL CHECK (v <> 'bad'))",
			"CREATE TABLE parent (id int PRIMARY KEY)",
			"CREATE TABLE child (id int PRIMARY KEY, p int NOT NULL, FOREIGN KEY (p) REFERENCES parent (id))")
		proxied, proxy := dbtest.ViaProxy(t, dsn, m.Addr(), 0)
		tg := openTarget(t, proxied, v.mode, v.multi)
		tg.maxPacket = 8192 // statements of at most 4 KiB
		// Fenced, as the copy of a stream is: the fence check rides along.
		if _, err := tg.Fence(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		big := table("big", []int{0}, "id int", "v varchar(200)")
		big.Columns[1].Nullable = false
		if err := tg.WritePlan(ctx, &tablecopy.Plan{Stream: "a", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		var rows []sluice.Row
		for i := range 500 {
			rows = append(rows, row(strconv.Itoa(i), strings.Repeat("v", 100)+strconv.Itoa(i)))
		}
		chunk := tablecopy.Chunk{Table: big.Name, N: 3}
		bad := func(r sluice.Row) []sluice.Row { return append(append([]sluice.Row(nil), rows...), r) }
		cases := []struct {
			name string
			rows tablecopy.Rows
			want string
		}{
			{"last row fails", produce(bad(row("9999", "bad")), 50, nil), "big chunk 3"},
			{"producer fails", produce(rows, 50, errors.New("source went away")), "source went away"},
			{"unchanged value", produce(bad(sluice.Row{sluice.Text("9999"), {Unchanged: true}}), 50, nil), "unchanged"},
			{"wrong width", produce(bad(row("9999")), 50, nil), "1 values, want 2"},
		}
		for _, c := range cases {
			_, err := tg.WriteChunk(ctx, "a", 1, big, chunk, false, c.rows)
			t.Logf("%s: %v", c.name, err)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "big chunk 3") {
				t.Fatalf("%s: error %v, want one naming %q and the chunk", c.name, err, c.want)
			}
			if n := count(t, db, "SELECT count(*) FROM big"); n != 0 {
				t.Fatalf("%s: %d rows committed", c.name, n)
			}
			if _, _, _, ok := chunkRecord(t, db, "a", "big", 3); ok {
				t.Fatalf("%s: chunk record written", c.name)
			}
		}
		// The connection drops mid-chunk: a retryable error, nothing
		// committed, and the next chunk runs on a new connection.
		_, err := tg.WriteChunk(ctx, "a", 1, big, chunk, false, func(emit func([]sluice.Row) error) error {
			if err := emit(rows[:250]); err != nil {
				return err
			}
			proxy.DropConnections()
			return emit(rows[250:])
		})
		var re *apply.RetryableError
		if !errors.As(err, &re) {
			t.Fatalf("dropped connection: error %v, want a retryable one", err)
		}
		if n := count(t, db, "SELECT count(*) FROM big"); n != 0 {
			t.Fatalf("dropped connection: %d rows committed", n)
		}
		if _, err := tg.Ping(ctx); err != nil { // reconnects, reading the packet limit again
			t.Fatal(err)
		}
		tg.maxPacket = 8192
		proxy.ResetRoundTrips()
		cs, err := tg.WriteChunk(ctx, "a", 1, big, chunk, false, produce(rows, 50, nil))
		if err != nil {
			t.Fatal(err)
		}
		n := proxy.RoundTrips()
		t.Logf("500 rows of 100 bytes in 4 KiB statements: %d round trips", n)
		if v.name == "multi" && n > 16 {
			t.Errorf("%d round trips for 15 statements", n)
		}
		if got := count(t, db, "SELECT count(*) FROM big"); got != 500 || cs.Rows != 500 {
			t.Fatalf("big has %d rows, chunk says %d; want 500", got, cs.Rows)
		}
		if done, nrows, copies, _ := chunkRecord(t, db, "a", "big", 3); !done || nrows != 500 || copies != 1 {
			t.Errorf("chunk record: done %v rows %d copies %d", done, nrows, copies)
		}

		// A small chunk costs one round trip with multi-statements; a
		// child's chunk may come before its parent's.
		child := table("child", []int{0}, "id int", "p int")
		child.Columns[1].Nullable = false
		parent := table("parent", []int{0}, "id int")
		if _, err := tg.WriteChunk(ctx, "a", 1, child, tablecopy.Chunk{Table: child.Name}, false, produce([]sluice.Row{row("1", "10")}, 1, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := tg.describe(ctx, parent); err != nil {
			t.Fatal(err)
		}
		proxy.ResetRoundTrips()
		if _, err := tg.WriteChunk(ctx, "a", 1, parent, tablecopy.Chunk{Table: parent.Name}, false, produce([]sluice.Row{row("10")}, 1, nil)); err != nil {
			t.Fatal(err)
		}
		if n := proxy.RoundTrips(); v.name == "multi" && n != 1 {
			t.Errorf("a one-row chunk cost %d round trips, want 1", n)
		}
		proxy.ResetRoundTrips()
		if _, err := tg.Digest(ctx, big, tablecopy.Range{From: row("10"), To: row("20")}); err != nil {
			t.Fatal(err)
		}
		if n := proxy.RoundTrips(); v.name == "multi" && n != 1 {
			t.Errorf("Digest cost %d round trips, want 1", n)
		}
		// The stream's writes after a copy run with foreign key checks off,
		// as every session of the target does (a rolled-back copy restores
		// the session's settings).
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(child, "2", "99")}, nil), sluice.Checkpoint{}); err != nil {
			t.Errorf("the stream's session checks foreign keys after a copy: %v", err)
		}
	})
}

// TestCopyReplace rewrites a chunk's range, on a composite key whose bounds
// hold characters that need escaping: rows outside it stay.
func TestCopyReplace(t *testing.T) {
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn, db := testDB(t, "CREATE TABLE kv (a int, b varchar(20), v text, PRIMARY KEY (a, b))",
			"INSERT INTO kv VALUES (1, 'x', 'old'), (2, 'a', 'old'), (2, 'o''k\\\\', 'old'), (2, 'z', 'old'), (3, 'a', 'old'), (3, 'b', 'old'), (4, 'a', 'old')")
		tg := openTarget(t, dsn, v.mode, v.multi)
		kv := table("kv", []int{0, 1}, "a int", "b varchar(20)", "v text")
		kv.Columns[1].Collation = "utf8mb4_unicode_ci" // the target's, as from a MySQL source
		if err := tg.WritePlan(ctx, &tablecopy.Plan{Stream: "r", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		// [(2, 'o'k\'), (3, 'b')): (2, 'o'k\'), (2, 'z') and (3, 'a').
		r := tablecopy.Range{From: row("2", `o'k\`), To: row("3", "b")}
		if _, err := tg.WriteChunk(ctx, "r", 1, kv, tablecopy.Chunk{Table: kv.Name, N: 1, Range: r}, true,
			produce([]sluice.Row{row("2", `o'k\`, "new"), row("2", "y", "new")}, 1, nil)); err != nil {
			t.Fatal(err)
		}
		want := []string{"1|x|old", "2|a|old", `2|o'k\|new`, "2|y|new", "3|b|old", "4|a|old"}
		if got := dump(t, db, "kv"); !reflect.DeepEqual(got, want) {
			t.Errorf("after replace: %q, want %q", got, want)
		}
		// A prefix bound: [(4), last).
		if _, err := tg.WriteChunk(ctx, "r", 1, kv, tablecopy.Chunk{Table: kv.Name, N: 2, Range: tablecopy.Range{From: row("4")}}, true,
			produce(nil, 1, nil)); err != nil {
			t.Fatal(err)
		}
		want = want[:5]
		if got := dump(t, db, "kv"); !reflect.DeepEqual(got, want) {
			t.Errorf("after replace of a prefix range: %q, want %q", got, want)
		}
		// The session is back to NO_BACKSLASH_ESCAPES.
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(kv, "5", `\`, `\n`)}, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := db.QueryRow("SELECT v FROM kv WHERE a = 5").Scan(&got); err != nil || got != `\n` {
			t.Errorf("applied after a copy: %q, %v", got, err)
		}
	})
}

// TestCopyReplaceBinaryKey replaces a range of a table keyed by raw bytes,
// bounds that are not UTF-8 included.
func TestCopyReplaceBinaryKey(t *testing.T) {
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn, db := testDB(t, "CREATE TABLE bk (k varbinary(10) PRIMARY KEY, v int)",
			"INSERT INTO bk VALUES (X'00', 0), (X'27', 0), (X'5c', 0), (X'7f', 0), (X'80', 0), (X'c328', 0), (X'ff', 0), (X'ff00', 0)")
		tg := openTarget(t, dsn, v.mode, v.multi)
		bk := table("bk", []int{0}, "k varbinary(10)", "v int")
		if err := tg.WritePlan(ctx, &tablecopy.Plan{Stream: "b", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			r    tablecopy.Range
			want string
		}{
			{tablecopy.Range{From: row("\x80"), To: row("\xff")}, "00:0 27:0 5c:0 7f:0 80:1 ff:0 ff00:0"},
			{tablecopy.Range{From: sluice.Row{sluice.Text("\x00")}, To: row("\x5c")}, "00:1 5c:0 7f:0 80:1 ff:0 ff00:0"},
			{tablecopy.Range{From: row("\xff")}, "00:1 5c:0 7f:0 80:1 ff:1 ff00:1"},
		} {
			var fill []sluice.Row
			for _, k := range []string{"\x00", "\x80", "\xff", "\xff\x00"} {
				if (c.r.From == nil || k >= c.r.From[0].Text) && (c.r.To == nil || k < c.r.To[0].Text) {
					fill = append(fill, sluice.Row{sluice.Text(k), sluice.Text("1")})
				}
			}
			if _, err := tg.WriteChunk(ctx, "b", 1, bk, tablecopy.Chunk{Table: bk.Name, Range: c.r}, true, produce(fill, 10, nil)); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := db.QueryRow("SELECT GROUP_CONCAT(LOWER(HEX(k)), ':', v ORDER BY k SEPARATOR ' ') FROM bk").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("after replace of %v: %s, want %s", c.r, got, c.want)
			}
		}
	})
}

// TestCopyDigest compares digests of equal tables in two databases, and
// sees a change of one column of one row.
func TestCopyDigest(t *testing.T) {
	ddl := "CREATE TABLE d (a int, b varchar(20), f double, ts timestamp(6) NULL, bin varbinary(10), n text, PRIMARY KEY (a, b))"
	fill := "INSERT INTO d SELECT seq DIV 10, CONCAT('k''\\\\', seq MOD 10), seq / 7, FROM_UNIXTIME(seq * 1000.5), UNHEX(HEX(seq)), IF(seq MOD 3 = 0, NULL, 'x') FROM seq_1_to_200"
	tbl := table("d", []int{0, 1}, "a int", "b varchar(20)", "f double", "ts timestamp(6)", "bin varbinary(10)", "n text")
	tbl.Columns[1].Collation = "utf8mb4_unicode_ci"
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn1, db1 := testDB(t, ddl, fill)
		dsn2, db2 := testDB(t, ddl, fill)
		t1 := openTarget(t, dsn1, v.mode, v.multi)
		t2 := openTarget(t, dsn2, v.mode, v.multi)
		ranges := []tablecopy.Range{
			{},
			{To: row("5", `k'\3`)},
			{From: row("5", `k'\3`), To: row("12")},
			{From: row("12")},
		}
		digests := func(tg *Target) []tablecopy.Digest {
			var out []tablecopy.Digest
			for _, r := range ranges {
				d, err := tg.Digest(ctx, tbl, r)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, d)
			}
			return out
		}
		d1, d2 := digests(t1), digests(t2)
		if !reflect.DeepEqual(d1, d2) {
			t.Fatalf("digests of equal tables differ: %v, %v", d1, d2)
		}
		if d1[0].Rows != 200 || d1[1].Rows+d1[2].Rows+d1[3].Rows != 200 || d1[1].Rows == 0 || d1[2].Rows == 0 || d1[0].Sum == "0" {
			t.Fatalf("digests %v", d1)
		}
		if _, err := db2.Exec(`UPDATE d SET ts = ts + INTERVAL 1 MICROSECOND WHERE a = 7 AND b = 'k''\\3'`); err != nil {
			t.Fatal(err)
		}
		d2 = digests(t2)
		for i, want := range []bool{false, true, false, true} {
			if (d1[i] == d2[i]) != want {
				t.Errorf("range %v after a change in range 2: digests %v and %v", ranges[i], d1[i], d2[i])
			}
		}
		if d1[2].Rows != d2[2].Rows {
			t.Errorf("row counts differ after an update: %v, %v", d1[2], d2[2])
		}
		// A MySQL source computes the same digests in a session with the
		// server's default sql_mode (backslash escapes on).
		cols := []string{"`a`", "`b`", "`f`", "`ts`", "`bin`", "`n`"}
		exprs := slices.Clone(cols)
		exprs[2] = keyrange.MyDigestColumn(cols[2], "double")
		for i, r := range ranges {
			var d tablecopy.Digest
			if err := db1.QueryRow(keyrange.MyDigest("`d`", exprs, keyrange.My(cols[:2], r))).Scan(&d.Rows, &d.Sum); err != nil {
				t.Fatal(err)
			}
			if d != d1[i] {
				t.Errorf("range %v: digest in a default session %v, target's %v", r, d, d1[i])
			}
		}
		// The session is back to NO_BACKSLASH_ESCAPES.
		if err := t2.Apply(ctx, apply.Compact([]sluice.Change{ins(tbl, "99", `\`, "1", null, null, `\n`)}, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := db2.QueryRow("SELECT n FROM d WHERE a = 99").Scan(&got); err != nil || got != `\n` {
			t.Errorf("applied after a digest: %q, %v", got, err)
		}
	})
}

// TestCopyDigestSeesEveryChange: a resumed copy keeps a done chunk whose
// digests match, so a change to any column must change the digest, also
// where the server's text hides it: a FLOAT prints 6 significant digits
// (12345.67 and 12345.68 both print 12345.7), so its text is not its
// value. Each change below is the smallest its type holds; the digest of
// the changed table must differ from the unchanged one's, and come back
// when the change is undone.
func TestCopyDigestSeesEveryChange(t *testing.T) {
	ddl := "CREATE TABLE e (id int PRIMARY KEY, f float, f2 float(7,2), d double, b bit(10), vb varbinary(8), bn binary(4), " +
		"dt datetime(6), ts timestamp(6) NULL, tm time(6), j json, de decimal(30,10), en enum('a','b'))"
	fill := "INSERT INTO e VALUES (1, 12345.67, 12345.67, 0.1, b'1000000001', x'00ff', x'01', '2024-01-02 03:04:05.123456', " +
		"'2024-01-02 03:04:05.123456', '-838:59:58.999999', '{\"a\": [1, 2.5]}', 1.0000000001, 'a'), (2, 1, 1, 1, b'0', x'', x'', NULL, NULL, NULL, NULL, NULL, NULL)"
	tbl := table("e", []int{0}, "id int", "f float", "f2 float(7,2)", "d double", "b bit(10)", "vb varbinary(8)", "bn binary(4)",
		"dt datetime(6)", "ts timestamp(6)", "tm time(6)", "j json", "de decimal(30,10)", "en enum('a','b')")
	ctx := context.Background()
	dsn1, _ := testDB(t, ddl, fill)
	dsn2, db2 := testDB(t, ddl, fill)
	t1 := openTarget(t, dsn1, Pipelined, nil)
	t2 := openTarget(t, dsn2, Pipelined, nil)
	digest := func(tg *Target) tablecopy.Digest {
		d, err := tg.Digest(ctx, tbl, tablecopy.Range{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	want := digest(t1)
	if got := digest(t2); got != want {
		t.Fatalf("digests of equal tables differ: %v, %v", want, got)
	}
	for _, c := range []struct{ col, change, undo string }{
		{"f", "12345.68", "12345.67"},
		{"f2", "12345.66", "12345.67"},
		{"d", "0.10000000000000002", "0.1"},
		{"b", "b'1000000000'", "b'1000000001'"},
		{"vb", "x'00fe'", "x'00ff'"},
		{"bn", "x'02'", "x'01'"},
		{"dt", "'2024-01-02 03:04:05.123457'", "'2024-01-02 03:04:05.123456'"},
		{"ts", "'2024-01-02 03:04:05.123457'", "'2024-01-02 03:04:05.123456'"},
		{"tm", "'-838:59:58.999998'", "'-838:59:58.999999'"},
		{"j", `'{"a": [1, 2.50001]}'`, `'{"a": [1, 2.5]}'`},
		{"de", "1.0000000002", "1.0000000001"},
		{"en", "'b'", "'a'"},
	} {
		if _, err := db2.Exec("UPDATE e SET " + c.col + " = " + c.change + " WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if got := digest(t2); got == want {
			t.Errorf("column %s set to %s: the digest did not change (%v)", c.col, c.change, got)
		}
		if _, err := db2.Exec("UPDATE e SET " + c.col + " = " + c.undo + " WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if got := digest(t2); got != want {
			t.Fatalf("column %s set back to %s: digest %v, want %v", c.col, c.undo, got, want)
		}
	}
}

// TestCopyChunkFenced (issue 28, item 8): a killed process's chunk, held
// in a dead link, reaches the target after a new process took the
// stream's generation and read the plan. Its fence check fails and nothing
// of it commits (apply.ErrFenced), so the new process's copy of the chunk
// commits; unfenced, the old chunk committed first and the new one failed
// on the duplicate key, stopping the stream until a restart.
func TestCopyChunkFenced(t *testing.T) {
	m := dbtest.Maria(t)
	eachCopy(t, func(t *testing.T, v variant) {
		ctx := context.Background()
		dsn, db := testDB(t, "CREATE TABLE zc (id int PRIMARY KEY, v text)")
		zc := table("zc", []int{0}, "id int", "v text")
		ck := tablecopy.Chunk{Table: zc.Name}
		proxied, proxy := dbtest.ViaProxy(t, dsn, m.Addr(), 0)
		old := openTarget(t, proxied, v.mode, v.multi)
		if _, err := old.Fence(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if err := old.WritePlan(ctx, &tablecopy.Plan{Stream: "s", Epoch: 1, Chunks: []tablecopy.ChunkState{{Chunk: ck}}}); err != nil {
			t.Fatal(err)
		}
		proxy.Blackhole(0)
		oldDone := make(chan error, 1)
		go func() {
			_, err := old.WriteChunk(ctx, "s", 1, zc, ck, false, produce([]sluice.Row{row("1", "old"), row("2", "old")}, 1, nil))
			oldDone <- err
		}()
		tg := openTarget(t, dsn, v.mode, v.multi)
		if _, err := tg.Fence(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if p, err := tg.ReadPlan(ctx, "s"); err != nil || len(p.Chunks) != 1 || p.Chunks[0].Done {
			t.Fatalf("plan before the old chunk arrives: %+v, %v", p, err)
		}
		proxy.ClearBlackhole()
		if err := <-oldDone; !errors.Is(err, apply.ErrFenced) {
			t.Errorf("the old process's chunk: %v, want apply.ErrFenced", err)
		}
		if _, err := tg.WriteChunk(ctx, "s", 1, zc, ck, false, produce([]sluice.Row{row("1", "new"), row("3", "new")}, 1, nil)); err != nil {
			t.Fatalf("the new process's chunk: %v", err)
		}
		want := []string{"1|new", "3|new"}
		if got := dump(t, db, "zc"); !slices.Equal(got, want) {
			t.Errorf("rows %v, want the new process's %v", got, want)
		}
		// The old process's plan and reset are fenced off too.
		if err := old.ResetTable(ctx, "s", zc); !errors.Is(err, apply.ErrFenced) {
			t.Errorf("the old process's ResetTable: %v, want apply.ErrFenced", err)
		}
		if err := old.WritePlan(ctx, &tablecopy.Plan{Stream: "s", Epoch: 2}); !errors.Is(err, apply.ErrFenced) {
			t.Errorf("the old process's WritePlan: %v, want apply.ErrFenced", err)
		}
		if got := dump(t, db, "zc"); !slices.Equal(got, want) {
			t.Errorf("rows %v after the old process's reset, want the new process's %v", got, want)
		}
	})
}
