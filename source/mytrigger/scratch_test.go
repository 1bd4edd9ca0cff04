package mytrigger

import (
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestScratch(t *testing.T) {
	dbn := dbtest.MariaDatabase(t)
	db, err := sql.Open("mysql", dbtest.Maria(t).DSN(dbn))
	if err != nil { t.Fatal(err) }
	q := func(s string) {
		rows, err := db.Query(s)
		if err != nil { t.Logf("%s: ERR %v", s, err); return }
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols)); ptrs := make([]any, len(cols))
			for i := range vals { ptrs[i] = &vals[i] }
			rows.Scan(ptrs...)
			var out []string
			for _, v := range vals { if v == nil { out = append(out, "NULL") } else { out = append(out, string(v)) } }
			t.Logf("%s => %q", s, out)
		}
		rows.Close()
	}
	q("SET sql_mode=''")
	q("CREATE TABLE z (id int primary key, ts timestamp(2) null, t time(3), y year, dt datetime(4), dd date, de decimal(10,3) zerofill, fl float(7,2))")
	q("INSERT INTO z VALUES (1, '0000-00-00 00:00:00', '-838:59:59', 0, '0000-00-00 00:00:00', '0000-00-00', 1.5, 1.555), (2, '2038-01-19 03:14:07.99', '12:00:00.5', 2024, '9999-12-31 23:59:59.9999', '2024-02-29', -1, -0.005)")
	q("SELECT ts, CAST(UNIX_TIMESTAMP(ts) AS CHAR), t, CAST(t AS CHAR), y, CAST(y AS CHAR), dt, CAST(dt AS CHAR), dd, CAST(dd AS CHAR), de, CAST(de AS CHAR), fl, CAST(fl AS CHAR) FROM z")
	conn, _ := db.Conn(t.Context())
	conn.ExecContext(t.Context(), "START TRANSACTION WITH CONSISTENT SNAPSHOT")
	rows, _ := conn.QueryContext(t.Context(), "SELECT trx_id, trx_mysql_thread_id, CONNECTION_ID(), trx_state, trx_is_read_only, trx_rows_modified FROM information_schema.innodb_trx")
	for rows.Next() { var a, b, c, d, e, f sql.NullString; if err := rows.Scan(&a, &b, &c, &d, &e, &f); err != nil {t.Log(err)}; t.Logf("trx %v %v %v %v %v %v", a, b, c, d, e, f) }
	rows.Close()
	conn.ExecContext(t.Context(), "COMMIT")
	q("CREATE TABLE g (id int primary key)")
	q("CREATE TRIGGER g_ai AFTER INSERT ON g FOR EACH ROW SET @x = 1")
	_, err = conn.ExecContext(t.Context(), "LOCK TABLES g WRITE")
	t.Log("lock", err)
	_, err = conn.ExecContext(t.Context(), "DROP TRIGGER g_ai"); t.Log("drop", err)
	_, err = conn.ExecContext(t.Context(), "CREATE TRIGGER g_ai AFTER INSERT ON g FOR EACH ROW /* hi */ SET @x = 2"); t.Log("create", err)
	_, err = conn.ExecContext(t.Context(), "UNLOCK TABLES"); t.Log("unlock", err)
	q("SELECT ACTION_STATEMENT, CHARACTER_SET_CLIENT, SQL_MODE FROM information_schema.triggers WHERE trigger_name='g_ai'")
	q("SELECT @@innodb_autoinc_lock_mode, @@version")
}
