package mycopy_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/internal/mycopy"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/tablecopy"
	"github.com/sluice-cdc/sluice/tablecopy/keyrange"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// begin opens a Reader on its own pool (the Reader closes it).
func begin(t testing.TB, dsn string, style mycopy.Style) *mycopy.Reader {
	t.Helper()
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	r, err := mycopy.Begin(context.Background(), db, mycopy.Config{Style: style, MariaDB: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// readChanges reads n changes of the binlog reader (markers dropped).
func readChanges(t testing.TB, r *binlog.Reader, n int) []sluice.Change {
	t.Helper()
	var out []sluice.Change
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d changes, want %d", len(out), n)
		}
		cs, err := r.Read(context.Background(), n-len(out))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Op != sluice.OpProgress {
				out = append(out, c)
			}
		}
	}
	return out
}

func readAll(t testing.TB, r tablecopy.Reader, tb *sluice.Table, rs []tablecopy.Range) []sluice.Row {
	t.Helper()
	var out []sluice.Row
	for _, rg := range rs {
		err := r.Read(context.Background(), tb, rg, func(b []sluice.Row) error {
			for _, row := range b {
				out = append(out, append(sluice.Row(nil), row...))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func rowString(r sluice.Row) string {
	var b strings.Builder
	for i, v := range r {
		if i > 0 {
			b.WriteString(", ")
		}
		if v.Null {
			b.WriteString("NULL")
		} else {
			fmt.Fprintf(&b, "%q", v.Text)
		}
	}
	return b.String()
}

// typesDDL is a table with a column of every type.
const typesDDL = `CREATE TABLE ty (
		id INT PRIMARY KEY,
		ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
		mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, zf INT(6) ZEROFILL,
		de DECIMAL(12,3), de0 DECIMAL(5,0), debig DECIMAL(65,30), f FLOAT, d DOUBLE, fmd FLOAT(7,3), dmd DOUBLE(12,2),
		ch CHAR(10), vc VARCHAR(64), tx TEXT, bn BINARY(6), vb VARBINARY(20), bl BLOB,
		dt DATE, dtm DATETIME(6), dtm0 DATETIME, dtm3 DATETIME(3), ts TIMESTAMP(6) NULL, ts0 TIMESTAMP NULL, tm TIME(6), tm0 TIME, tm2 TIME(2), yr YEAR,
		js JSON, en ENUM('a','b c','ü'), st SET('x','y','z'), b1 BIT(1), b10 BIT(10), b64 BIT(64), bool1 TINYINT(1),
		l1 VARCHAR(300) CHARACTER SET latin1, a1 VARCHAR(200) CHARACTER SET ascii, u3 VARCHAR(50) CHARACTER SET utf8mb3,
		e1 ENUM('é','€uro','x') CHARACTER SET latin1
	) DEFAULT CHARSET=utf8mb4`

// insertTypes writes 16 rows of edge values of every type (zero dates
// need a non-strict sql_mode).
func insertTypes(t *testing.T, db *sql.DB) {
	t.Helper()
	var latin strings.Builder
	latin.WriteString("x'")
	for b := 0; b < 256; b++ {
		fmt.Fprintf(&latin, "%02x", b)
	}
	latin.WriteString("'")
	dbtest.ExecSQL(t, db, "SET SESSION sql_mode = ''",
		`INSERT INTO ty VALUES (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,
			-9223372036854775808, 18446744073709551615, 42, -123456789.125, 42, 12345678901234567890.000000000000000000000000000001,
			3.14159, 2.718281828459045, 1234.5, 12.3, 'ab', 'héllo ✓', 'long text', 'ab', x'00ff10', x'deadbeef',
			'2024-02-29', '2024-02-29 13:14:15.123456', '1999-12-31 23:59:59', '2000-01-01 00:00:00.5', '2024-03-01 01:02:03.000001', '2038-01-19 03:14:07',
			'-838:59:59.000000', '12:00:00', '01:02:03.4', 2155,
			'{"a": [1, 2.5, "x"], "b": null}', 'b c', 'x,z', b'1', b'1010101010', x'ffffffffffffffff', 1,
			`+latin.String()+`, ' ~azAZ09!', 'héllo ✓', '€uro')`,
		`INSERT INTO ty (id, f, d, de, tm, dtm, ts, yr, en, st, bn, b10, dt, ts0, zf, fmd, dmd) VALUES
			(2, 1e20, 1.5e-7, 0.5, '00:00:00', '2000-01-01 00:00:00', '1970-01-01 00:00:01', 1901, 'ü', '', '', b'0', '0000-00-00', '0000-00-00 00:00:00', 0, -0.001, 0),
			(3, -0.1, 123456789012345678, -0.001, '-00:00:01.5', '9999-12-31 23:59:59.999999', '2024-01-01 00:00:00.000000', 2000, 'a', 'x,y,z', 'abcdef', b'1111111111', '2024-00-00', NULL, 1, 0, -1.5),
			(4, 100, 1e15, 99999.999, '838:59:59', '1000-01-01 00:00:00', NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(5, 123456, 0.1, 0, '10:00:00.000001', '0000-00-00 00:00:00', '0000-00-00 00:00:00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(6, 1234567, 1e-5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(7, 0.000123, 12345.678, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(9, 16777215, 123456789012345, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(10, 3.4e38, -1.7976931348623157e308, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(11, 1.17549435e-38, 5e-324, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(12, 0.5, 0.3333333333333333, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(13, 999999.5, 999999999999999.9, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(14, -0.0001, 0.0001, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(15, -0, -0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(16, 16777217, 1e-300, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`)
}

// compareTypes reads the types table through a copy reader of style and
// requires exactly the rows cs the stream reader gave.
func compareTypes(t *testing.T, dsn string, style mycopy.Style, tb *sluice.Table, cs []sluice.Change) *mycopy.Reader {
	t.Helper()
	const n = 16
	c := begin(t, dsn, style)
	ctx := context.Background()
	rs, est, err := c.Split(ctx, tb, 5)
	if err != nil {
		t.Fatal(err)
	}
	if est != n || len(rs) < 2 || rs[0].From != nil || rs[len(rs)-1].To != nil {
		t.Fatalf("Split: %d rows, ranges %v", est, rs)
	}
	got := readAll(t, c, tb, rs)
	if len(got) != n || len(cs) != n {
		t.Fatalf("copy read %d rows, stream %d, want %d", len(got), len(cs), n)
	}
	byID := map[string]sluice.Row{}
	for _, row := range got {
		byID[row[0].Text] = row
	}
	for _, ch := range cs {
		want := ch.Row
		row := byID[want[0].Text]
		if len(row) != len(want) {
			t.Errorf("row %s: copy has %d values, stream %d", want[0].Text, len(row), len(want))
			continue
		}
		for i := range want {
			if row[i] != want[i] {
				t.Errorf("row %s column %s (%s): copy %s, stream %s", want[0].Text, tb.Columns[i].Name, tb.Columns[i].Type,
					rowString(row[i:i+1]), rowString(want[i:i+1]))
			}
		}
	}
	return c
}

// TestSameTextAsBinlog inserts rows of every type after a binlog reader
// started and requires the copy to read exactly the rows the binlog
// reader streamed.
func TestSameTextAsBinlog(t *testing.T) {
	// The writer's time zone is not the copy's: TIMESTAMPs are UTC.
	d := dbtest.MariaEngine.DatabaseWith(t, map[string]string{"time_zone": "'+02:00'"}, typesDDL)
	dbn, db := d.Name, d.My
	r, err := binlog.Open(context.Background(), d.DSN, binlog.Config{Tables: []sluice.TableName{{Schema: dbn, Name: "ty"}}}, sluice.Position{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	insertTypes(t, db)
	const n = 16
	cs := readChanges(t, r, n)
	tb := r.Tables()[0]
	c := compareTypes(t, d.DSN, mycopy.Binlog, tb, cs)
	ctx := context.Background()
	// The digest of the whole table equals the sum of its ranges' and
	// changes when a row does.
	whole, err := c.Digest(ctx, tb, tablecopy.Range{})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Rows != n || whole.Sum == "" || whole.Sum == "0" {
		t.Fatalf("digest %+v", whole)
	}
	dbtest.ExecSQL(t, db, "UPDATE ty SET vc = 'changed' WHERE id = 1")
	if again, _ := c.Digest(ctx, tb, tablecopy.Range{}); again != whole {
		t.Errorf("digest in the snapshot changed after a commit: %+v, was %+v", again, whole)
	}
	c2 := begin(t, d.DSN, mycopy.Binlog)
	if after, _ := c2.Digest(ctx, tb, tablecopy.Range{}); after == whole || after.Rows != n {
		t.Errorf("digest of a new snapshot after a change: %+v, was %+v", after, whole)
	}
}

// TestSameTextAsTrigger: the same for the trigger reader.
func TestSameTextAsTrigger(t *testing.T) {
	d := dbtest.MariaEngine.DatabaseWith(t, map[string]string{"time_zone": "'+02:00'"}, typesDDL)
	db := d.My
	r, err := mytrigger.Open(context.Background(), d.DSN, mytrigger.Config{Tables: []sluice.TableName{{Name: "ty"}}, Install: true}, sluice.Position{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	insertTypes(t, db)
	var cs []sluice.Change
	deadline := time.Now().Add(30 * time.Second)
	for len(cs) < 16 {
		if time.Now().After(deadline) {
			t.Fatalf("got %d changes, want 16", len(cs))
		}
		got, err := r.Read(context.Background(), 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			if c.Op != sluice.OpProgress {
				cs = append(cs, c)
			}
		}
	}
	compareTypes(t, d.DSN, mycopy.Trigger, r.Tables()[0], cs)
}

// TestSplit: integer keys split by value width, other keys by row number,
// tables without a key whole; the ranges cover every row once.
func TestSplit(t *testing.T) {
	d := dbtest.MariaEngine.Database(t,
		"CREATE TABLE ik (id BIGINT UNSIGNED PRIMARY KEY, v INT)",
		"INSERT INTO ik SELECT 18446744073709551615 - 7000 + (seq - 1) * 7, seq FROM seq_1_to_1000",
		"CREATE TABLE ck (a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b))",
		"INSERT INTO ck SELECT CONCAT('k', seq % 13), seq, seq FROM seq_1_to_1000",
		"CREATE TABLE nk (v INT)",
		"INSERT INTO nk SELECT seq FROM seq_1_to_100")
	c := begin(t, d.DSN, mycopy.Binlog)
	ctx := context.Background()
	for _, tc := range []struct {
		tb      *sluice.Table
		minRngs int
	}{
		{&sluice.Table{Name: sluice.TableName{Schema: d.Name, Name: "ik"}, Columns: []sluice.Column{{Name: "id"}, {Name: "v"}}, Key: []int{0}}, 8},
		{&sluice.Table{Name: sluice.TableName{Schema: d.Name, Name: "ck"}, Columns: []sluice.Column{{Name: "a"}, {Name: "b"}, {Name: "v"}}, Key: []int{0, 1}}, 10},
		{&sluice.Table{Name: sluice.TableName{Schema: d.Name, Name: "nk"}, Columns: []sluice.Column{{Name: "v"}}}, 1},
	} {
		t.Run(tc.tb.Name.Name, func(t *testing.T) {
			rs, est, err := c.Split(ctx, tc.tb, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) < tc.minRngs || rs[0].From != nil || rs[len(rs)-1].To != nil {
				t.Fatalf("ranges %v (estimate %d)", rs, est)
			}
			for i := 1; i < len(rs); i++ {
				if tablecopy.EncodeBound(rs[i].From) != tablecopy.EncodeBound(rs[i-1].To) {
					t.Fatalf("range %d does not start where %d ends: %v", i, i-1, rs)
				}
			}
			rows := readAll(t, c, tc.tb, rs)
			seen := map[string]bool{}
			for _, r := range rows {
				k := rowString(r)
				if seen[k] {
					t.Fatalf("row %s read twice", k)
				}
				seen[k] = true
			}
			n := d.QueryInt(t, "SELECT COUNT(*) FROM "+tc.tb.Name.Name)
			if len(rows) != n {
				t.Fatalf("read %d rows, table has %d", len(rows), n)
			}
			// The digests of the ranges add up to the whole's.
			var rowsSum int64
			for _, rg := range rs {
				d, err := c.Digest(ctx, tc.tb, rg)
				if err != nil {
					t.Fatal(err)
				}
				rowsSum += d.Rows
			}
			if rowsSum != int64(n) {
				t.Fatalf("digest rows %d, want %d", rowsSum, n)
			}
		})
	}
	_ = keyrange.MySession
}
