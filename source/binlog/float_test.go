package binlog

import (
	"database/sql"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// TestFloatText checks FLOAT and DOUBLE formatting against the server on
// random values of every magnitude.
func TestFloatText(t *testing.T) {
	m := dbtest.Maria(t)
	dbn := dbtest.MariaDatabase(t)
	db := sqlDB(t, m.DSN(dbn))
	exec(t, db, "CREATE TABLE p (id INT PRIMARY KEY, d DOUBLE, f FLOAT)")
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
	exec(t, db, "INSERT INTO p VALUES "+b.String())
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
		if got := formatFloat(float64(float32(fd)), 32, true); got != f && badf < 15 {
			badf++
			t.Errorf("float %v: maria %s ours %s", fd, f, got)
		}
	}
	_ = sql.ErrNoRows
}
