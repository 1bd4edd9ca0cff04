package binlog

import (
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestFloatText checks DOUBLE formatting against the server's text on
// random values of every magnitude, and that FLOAT's reads back exactly.
func TestFloatText(t *testing.T) {
	d := utcDatabase(t)
	db := d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE p (id INT PRIMARY KEY, d DOUBLE, f FLOAT)")
	vals := []float64{1e14, 99999999999999, 1e13, 1.5e14, 123456789012345, 12345678901234, 0.0001, 0.00012345678901234, 1e-4, 1.234e-4}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		e := rnd.IntN(60) - 30
		vals = append(vals, (rnd.Float64()*2-1)*math.Pow(10, float64(e)))
		vals = append(vals, math.Round(rnd.Float64()*1e6)*math.Pow(10, float64(e)))
	}
	bad, badf := 0, 0
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(" + strconv.Itoa(i) + "," + strconv.FormatFloat(v, 'g', -1, 64) + "," + strconv.FormatFloat(v, 'g', -1, 64) + ")")
	}
	dbtest.ExecSQL(t, db, "INSERT INTO p VALUES "+b.String())
	rows, _ := db.Query("SELECT id, d, f, CAST(f AS DOUBLE) FROM p ORDER BY id")
	for rows.Next() {
		var id int
		var d, f string
		var fd float64
		rows.Scan(&id, &d, &f, &fd)
		if got := formatFloat(vals[id], 64, true); got != d && bad < 15 {
			bad++
			t.Errorf("double %v: maria %s ours %s", vals[id], d, got)
		}
		// FLOAT is not compared with the text protocol's form, which is
		// rounded to 6 digits, but with the value (TestFloatExact has the
		// server's own binary form).
		if got := formatFloat(fd, 32, true); float32(mustParse(t, got, 32)) != float32(fd) && badf < 15 {
			badf++
			t.Errorf("float %v: maria shows %s, ours %s reads back as another float32", fd, f, got)
		}
	}
	_ = sql.ErrNoRows
}

// TestFloatExact judges FLOAT and DOUBLE values by their binary value, not
// by text both servers print: the source column is read through a
// server-side prepared statement (the binary protocol sends the stored
// float32 or float64 as is), and what the reader emitted must parse back
// to the identical bits.
func TestFloatExact(t *testing.T) {
	d := utcDatabase(t)
	dbn, db := d.Name, d.My
	dbtest.ExecSQL(t, db, "CREATE TABLE fe (id INT PRIMARY KEY, f FLOAT, d DOUBLE)")
	floats := []float32{1234567, 16777216, 16777217, 0.1234567, 3.4028235e38, -3.4028235e38, 1.17549435e-38,
		1e-45, 1.4e-44, float32(math.Copysign(0, -1)), 0.1, 1e15, 123456, 3.14159, -2.5e-12, 7654321.5}
	doubles := []float64{0.1, 1e-300, 1.7976931348623157e308, 5e-324, 123456.789, math.Copysign(0, -1), 1e15, 123456789012345678,
		0.3333333333333333, 2.2250738585072014e-308}
	r := open(t, d.DSN, Config{Tables: []sluice.TableName{tn(dbn, "fe")}}, sluice.Position{})
	n := max(len(floats), len(doubles))
	for i := 0; i < n; i++ {
		f, d := "NULL", "NULL"
		if i < len(floats) {
			// The float32's exact value as a double literal, which the
			// server stores as that float32.
			f = strconv.FormatFloat(float64(floats[i]), 'g', -1, 64)
		}
		if i < len(doubles) {
			d = strconv.FormatFloat(doubles[i], 'g', -1, 64)
		}
		dbtest.ExecSQL(t, db, fmt.Sprintf("INSERT INTO fe VALUES (%d, %s, %s)", i, f, d))
	}
	cs := readN(t, r, n, true)
	// A query argument makes go-sql-driver prepare the statement on the
	// server: the binary protocol.
	rows, err := db.Query("SELECT id, f, d FROM fe WHERE id >= ? ORDER BY id", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var f sql.Null[float32]
		var d sql.Null[float64]
		if err := rows.Scan(&id, &f, &d); err != nil {
			t.Fatal(err)
		}
		row := cs[id].Row
		if f.Valid {
			got, err := strconv.ParseFloat(row[1].Text, 32)
			if err != nil || math.Float32bits(float32(got)) != math.Float32bits(f.V) {
				t.Errorf("FLOAT %v (bits %08x): reader sent %q, which reads back as %v", f.V, math.Float32bits(f.V), row[1].Text, float32(got))
			}
		}
		if d.Valid {
			got, err := strconv.ParseFloat(row[2].Text, 64)
			if err != nil || math.Float64bits(got) != math.Float64bits(d.V) {
				t.Errorf("DOUBLE %v (bits %016x): reader sent %q, which reads back as %v", d.V, math.Float64bits(d.V), row[2].Text, got)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
