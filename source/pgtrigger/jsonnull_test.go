package pgtrigger

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

// jsonValue is a value written into json and jsonb columns, with what the
// reader must hand out for each.
type jsonValue struct {
	sql         string
	json, jsonb sluice.Value
}

// jsonValues are the values that row_to_json writes alike (SQL NULL, the
// JSON null) or that look like them.
var jsonValues = []jsonValue{
	{`NULL`, sluice.Null, sluice.Null},
	{`'null'`, sluice.Text("null"), sluice.Text("null")},
	{`'"null"'`, sluice.Text(`"null"`), sluice.Text(`"null"`)},
	{`'{}'`, sluice.Text("{}"), sluice.Text("{}")},
	{`'{"a": [null, {"b": null}], "c": "null"}'`, sluice.Text(`{"a": [null, {"b": null}], "c": "null"}`), sluice.Text(`{"a": [null, {"b": null}], "c": "null"}`)},
	// json keeps its text, jsonb normalises it.
	{`' null '`, sluice.Text(" null "), sluice.Text("null")},
	{`'[null]'`, sluice.Text("[null]"), sluice.Text("[null]")},
}

// wantChange is a change the reader must hand out: the table, the op and
// the values of the key and the row image (nil when the change has none).
type wantChange struct {
	table string
	op    sluice.Op
	key   sluice.Row
	row   sluice.Row
}

// checkChanges compares changes with what they must be, value by value:
// sluice.Null and sluice.Text("null") are different values.
func checkChanges(t *testing.T, got []sluice.Change, want []wantChange) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d changes, want %d: %s", len(got), len(want), dbtest.DescribeChanges(got))
	}
	for i, w := range want {
		c := got[i]
		if c.Table.Name.Name != w.table || c.Op != w.op {
			t.Errorf("change %d is %s %s, want %s %s", i, c.Op, c.Table.Name, w.op, w.table)
			continue
		}
		cmp := func(what string, names []string, got, want sluice.Row) {
			if len(got) != len(want) {
				t.Errorf("change %d (%s %s) %s = %v, want %v", i, w.op, w.table, what, got, want)
				return
			}
			for j := range want {
				if got[j] != want[j] {
					t.Errorf("change %d (%s %s) %s column %s = %#v, want %#v", i, w.op, w.table, what, names[j], got[j], want[j])
				}
			}
		}
		var cols []string
		for _, col := range c.Table.Columns {
			cols = append(cols, col.Name)
		}
		cmp("key", c.Table.KeyNames(), c.Key, w.key)
		cmp("row", cols, c.Row, w.row)
	}
}

// TestJSONNulls checks that a json or jsonb column holding the JSON value
// null and one holding SQL NULL each arrive as what they are, in row images
// (insert, update) and in old key images (update, delete), with json and
// jsonb values that look alike around them.
func TestJSONNulls(t *testing.T) {
	f := newFixture(t,
		`CREATE DOMAIN jdom AS jsonb`,
		`CREATE DOMAIN jdom2 AS jdom`,
		`CREATE TABLE j (id int PRIMARY KEY, v text, j json, jb jsonb, jd jdom2, jn json NOT NULL, pad text)`,
		// A jsonb key column holds the JSON value, never SQL NULL.
		`CREATE TABLE jk (k jsonb, n int, j json, PRIMARY KEY (k, n))`)
	r := f.open(t, Config{Tables: dbtest.Tables("j", "jk"), Install: true}, sluice.Position{})

	vals := jsonValues
	n := len(vals)
	// Rows 1..n have short images, n+1..2n long ones (the capture finds
	// the null members of each kind in its own way).
	pad := func(id int) (string, sluice.Value) {
		if id <= n {
			return "NULL", sluice.Null
		}
		return "repeat('x', 2000)", sluice.Text(strings.Repeat("x", 2000))
	}
	// row is the image of j's row id holding value i, and jn the value of
	// the NOT NULL column, JSON null standing in for SQL NULL.
	row := func(id, i int) (string, sluice.Row) {
		v := vals[i]
		jn, jnWant := v.sql, v.json
		if jn == "NULL" {
			jn, jnWant = "'null'", sluice.Text("null")
		}
		p, pWant := pad(id)
		return fmt.Sprintf("v = 'v%d', j = %s, jb = %s, jd = %s, jn = %s, pad = %s", i, v.sql, v.sql, v.sql, jn, p),
			sluice.Row{sluice.Text(fmt.Sprint(id)), sluice.Text(fmt.Sprintf("v%d", i)), v.json, v.jsonb, v.jsonb, jnWant, pWant}
	}
	key := func(id int) sluice.Row { return sluice.Row{sluice.Text(fmt.Sprint(id))} }
	var want []wantChange
	for id := 1; id <= 2*n; id++ {
		set, image := row(id, (id-1)%n)
		f.Exec(t, fmt.Sprintf(`INSERT INTO j (id, jn) VALUES (%d, '{}')`, id), fmt.Sprintf(`UPDATE j SET %s WHERE id = %d`, set, id))
		want = append(want,
			wantChange{"j", sluice.OpInsert, nil, sluice.Row{image[0], sluice.Null, sluice.Null, sluice.Null, sluice.Null, sluice.Text("{}"), sluice.Null}},
			wantChange{"j", sluice.OpUpdate, key(id), image})
	}
	// Every value becomes the next one: SQL NULL becomes JSON null, JSON
	// null a JSON string, ..., the last one SQL NULL.
	for id := 1; id <= 2*n; id++ {
		set, image := row(id, id%n)
		f.Exec(t, fmt.Sprintf(`UPDATE j SET %s WHERE id = %d`, set, id))
		want = append(want, wantChange{"j", sluice.OpUpdate, key(id), image})
	}
	f.Exec(t, `DELETE FROM j`)
	for id := 1; id <= 2*n; id++ {
		want = append(want, wantChange{"j", sluice.OpDelete, key(id), nil})
	}
	checkChanges(t, collect(t, r, len(want), 1000), want)

	// Key images: every non-NULL value as a jsonb key.
	want = nil
	var keyVals []jsonValue
	for _, v := range vals {
		if !v.jsonb.Null && !slices.ContainsFunc(keyVals, func(k jsonValue) bool { return k.jsonb == v.jsonb }) {
			keyVals = append(keyVals, v)
		}
	}
	for i, v := range keyVals {
		f.Exec(t, fmt.Sprintf(`INSERT INTO jk VALUES (%s, %d, %s)`, v.sql, i, v.sql))
		want = append(want, wantChange{"jk", sluice.OpInsert, nil, sluice.Row{v.jsonb, sluice.Text(fmt.Sprint(i)), v.json}})
	}
	for i, v := range keyVals {
		// The key stays, the json column becomes SQL NULL.
		k := sluice.Row{v.jsonb, sluice.Text(fmt.Sprint(i))}
		f.Exec(t, fmt.Sprintf(`UPDATE jk SET j = NULL WHERE n = %d`, i))
		want = append(want, wantChange{"jk", sluice.OpUpdate, k, sluice.Row{v.jsonb, k[1], sluice.Null}})
	}
	// The key changes from the JSON null, then back.
	f.Exec(t, `UPDATE jk SET k = '[null, null]' WHERE k = 'null'`, `UPDATE jk SET k = 'null', j = 'null' WHERE k = '[null, null]'`)
	want = append(want,
		wantChange{"jk", sluice.OpUpdate, sluice.Row{sluice.Text("null"), sluice.Text("0")}, sluice.Row{sluice.Text("[null, null]"), sluice.Text("0"), sluice.Null}},
		wantChange{"jk", sluice.OpUpdate, sluice.Row{sluice.Text("[null, null]"), sluice.Text("0")}, sluice.Row{sluice.Text("null"), sluice.Text("0"), sluice.Text("null")}})
	for i, v := range keyVals {
		f.Exec(t, fmt.Sprintf(`DELETE FROM jk WHERE n = %d`, i))
		want = append(want, wantChange{"jk", sluice.OpDelete, sluice.Row{v.jsonb, sluice.Text(fmt.Sprint(i))}, nil})
	}
	checkChanges(t, collect(t, r, len(want), 1000), want)
}

// legacyCaptureBody is the capture function of the sluice that knew no
// nulls column: its changelog rows do not tell SQL NULL from JSON null.
const legacyCaptureBody = `
DECLARE
	old_row json;
	old_key json;
BEGIN
	-- TG_ARGV[0] is the table as sluice names it (a partition's trigger
	-- still names its parent), the rest its primary key columns.
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %[1]s (tbl, op, data) VALUES (TG_ARGV[0], 'I', row_to_json(NEW));
		RETURN NULL;
	END IF;
	old_row := row_to_json(OLD);
	SELECT json_object_agg(k, old_row -> k) INTO old_key FROM unnest(TG_ARGV[1:]) AS k;
	IF TG_OP = 'UPDATE' THEN
		INSERT INTO %[1]s (tbl, op, key, data) VALUES (TG_ARGV[0], 'U', old_key, row_to_json(NEW));
	ELSE
		INSERT INTO %[1]s (tbl, op, key) VALUES (TG_ARGV[0], 'D', old_key);
	END IF;
	RETURN NULL;
END
`

// installLegacy leaves the database as the sluice before the nulls column
// installed it: the changelog without nulls, its capture function, and
// capture triggers whose arguments are the table and its key only.
func installLegacy(t *testing.T, f *fixture, tbls []sluice.TableName) {
	t.Helper()
	ctx := context.Background()
	if err := Install(ctx, f.PG, "", tbls); err != nil {
		t.Fatalf("Install: %v", err)
	}
	legacy := function{name: captureFunc, set: "SET extra_float_digits = 3\nSET IntervalStyle = postgres\n",
		body: fmt.Sprintf(legacyCaptureBody, ident(DefaultSchema, changelogTable))}
	f.Exec(t, `ALTER TABLE sluice.changelog DROP COLUMN nulls`, legacy.create(DefaultSchema))
	for _, tn := range normalize(tbls) {
		info, err := lookupTable(ctx, f.PG, f.Name, tn)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{quoteLiteral(ident(tn.Schema, tn.Name))}
		for _, k := range info.keyNames() {
			args = append(args, quoteLiteral(k))
		}
		f.Exec(t, fmt.Sprintf(`DROP TRIGGER sluice_capture ON %s`, ident(tn.Schema, tn.Name)),
			fmt.Sprintf(`CREATE TRIGGER sluice_capture AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION sluice.capture(%s)`,
				ident(tn.Schema, tn.Name), strings.Join(args, ", ")))
	}
}

// triggerOIDs maps "table trigger" to the trigger's oid, for every sluice
// trigger: a re-created trigger has a new one.
func triggerOIDs(t *testing.T, f *fixture) map[string]uint32 {
	t.Helper()
	rows, err := f.PG.Query(context.Background(), `SELECT tgrelid::regclass::text || ' ' || tgname, oid FROM pg_trigger WHERE tgname LIKE 'sluice%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]uint32{}
	for rows.Next() {
		var name string
		var oid uint32
		if err := rows.Scan(&name, &oid); err != nil {
			t.Fatal(err)
		}
		out[name] = oid
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInstallUpgradesJSONNulls checks the upgrade of an install made by
// the sluice that did not tell SQL NULL from JSON null: Install adds the
// changelog column, replaces the capture function and re-creates only the
// capture triggers of tables with nullable json columns; a second Install
// changes nothing; the rows captured before the upgrade read as they did
// (SQL NULL, with a warning), those captured after it exactly. A table
// the upgrade left out keeps capturing with its old trigger.
func TestInstallUpgradesJSONNulls(t *testing.T) {
	f := newFixture(t,
		`CREATE TABLE j (id int PRIMARY KEY, j json, jb jsonb)`,
		`CREATE TABLE p (id int PRIMARY KEY, v text)`,
		`CREATE TABLE other (id int PRIMARY KEY, j json)`)
	ctx := context.Background()
	tbls := dbtest.Tables("j", "p")
	installLegacy(t, f, dbtest.Tables("j", "p", "other"))

	// Captured by the legacy install.
	f.Exec(t, `INSERT INTO j VALUES (1, NULL, NULL), (2, 'null', 'null'), (3, '{}', '"null"')`)

	missing, err := missingObjects(ctx, f.PG, DefaultSchema, tbls)
	if err != nil {
		t.Fatal(err)
	}
	wantMissing := []string{"table sluice.changelog", "function sluice.capture()", "capture trigger sluice_capture on public.j"}
	if !slices.Equal(missing, wantMissing) {
		t.Fatalf("missing before the upgrade = %q, want %q", missing, wantMissing)
	}
	_, err = Open(ctx, f.URL, Config{Tables: tbls, Logger: slog.New(slog.DiscardHandler)}, sluice.Position{})
	if err == nil || !strings.Contains(err.Error(), "does not tell SQL NULL from the JSON value null in its nullable json and jsonb columns (j, jb)") ||
		!strings.Contains(err.Error(), "sluice source install") {
		t.Fatalf("Open on the legacy install: %v, want an error saying the trigger does not tell JSON null from SQL NULL and to install", err)
	}

	before := triggerOIDs(t, f)
	if err := Install(ctx, f.PG, "", tbls); err != nil {
		t.Fatalf("Install over the legacy install: %v", err)
	}
	after := triggerOIDs(t, f)
	for name, oid := range before {
		if recreated := after[name] != oid; recreated != (name == "j sluice_capture") {
			t.Errorf("trigger %s: re-created %v by the upgrade, want %v", name, recreated, !recreated)
		}
	}
	info, err := lookupTable(ctx, f.PG, f.Name, sluice.TableName{Schema: "public", Name: "j"})
	if err != nil {
		t.Fatal(err)
	}
	trg, _, err := lookupTrigger(ctx, f.PG, info.oid, triggerName(DefaultSchema), ident(DefaultSchema, captureFunc))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`"public"."j"`, "id", "", "j", "jb"}; !slices.Equal(trg.args, want) {
		t.Errorf("capture trigger arguments on j = %q, want %q", trg.args, want)
	}
	if missing, err := missingObjects(ctx, f.PG, DefaultSchema, tbls); err != nil || len(missing) > 0 {
		t.Fatalf("missing after the upgrade = %q, %v; want nothing", missing, err)
	}
	if err := Install(ctx, f.PG, "", tbls); err != nil {
		t.Fatalf("second Install: %v", err)
	}
	if again := triggerOIDs(t, f); fmt.Sprint(again) != fmt.Sprint(after) {
		t.Errorf("a second Install re-created triggers: %v, then %v", after, again)
	}

	// Captured by the upgraded install; the table left out still
	// captures, with the new function and its old trigger.
	f.Exec(t,
		`INSERT INTO j VALUES (4, NULL, NULL), (5, 'null', 'null')`,
		`UPDATE j SET j = 'null', jb = NULL WHERE id = 1`,
		`UPDATE j SET j = NULL, jb = 'null' WHERE id = 2`,
		`INSERT INTO p VALUES (1, NULL)`,
		`INSERT INTO other VALUES (1, 'null')`)
	if n := f.QueryInt(t, `SELECT count(*) FROM sluice.changelog WHERE tbl = '"public"."other"' AND nulls IS NULL`); n != 1 {
		t.Errorf("%d changelog rows of the table left out, want 1", n)
	}

	var logs bytes.Buffer
	r := f.open(t, Config{Tables: tbls, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, sluice.Position{})
	null, jnull := sluice.Null, sluice.Text("null")
	id := func(i int) sluice.Value { return sluice.Text(fmt.Sprint(i)) }
	checkChanges(t, collect(t, r, 8, 100), []wantChange{
		// Before the upgrade the JSON nulls could not be told apart.
		{"j", sluice.OpInsert, nil, sluice.Row{id(1), null, null}},
		{"j", sluice.OpInsert, nil, sluice.Row{id(2), null, null}},
		{"j", sluice.OpInsert, nil, sluice.Row{id(3), sluice.Text("{}"), sluice.Text(`"null"`)}},
		{"j", sluice.OpInsert, nil, sluice.Row{id(4), null, null}},
		{"j", sluice.OpInsert, nil, sluice.Row{id(5), jnull, jnull}},
		{"j", sluice.OpUpdate, sluice.Row{id(1)}, sluice.Row{id(1), jnull, null}},
		{"j", sluice.OpUpdate, sluice.Row{id(2)}, sluice.Row{id(2), null, jnull}},
		{"p", sluice.OpInsert, nil, sluice.Row{id(1), null}},
	})
	for _, col := range []string{"column=j ", "column=jb "} {
		if n := strings.Count(logs.String(), "without telling SQL NULL from JSON null"); n != 2 || !strings.Contains(logs.String(), col) {
			t.Errorf("warnings about the legacy rows (one per column, want 2, naming %s):\n%s", col, logs.String())
		}
	}
}

// TestJSONNullsAfterAlter checks that no later ALTER TABLE makes the
// capture of json nulls fail the application's writes, and that what it
// records stays right: a dropped or renamed column is never named in a
// statement, a column whose type became a domain that refuses NULL (which
// makes the cheap test raise) is asked directly. A partition, whose columns lie in another
// order than its parent's, captures the same way.
func TestJSONNullsAfterAlter(t *testing.T) {
	f := newFixture(t,
		`CREATE TABLE a (id int PRIMARY KEY, j json, jb jsonb, gone json, pad text)`,
		`CREATE TABLE pt (id int, j json, jb jsonb, PRIMARY KEY (id)) PARTITION BY RANGE (id)`,
		`CREATE TABLE pt1 (jb jsonb, x int, j json, id int NOT NULL)`,
		`ALTER TABLE pt1 DROP COLUMN x`,
		`ALTER TABLE pt ATTACH PARTITION pt1 FOR VALUES FROM (0) TO (100)`)
	if err := Install(context.Background(), f.PG, "", dbtest.Tables("a", "pt")); err != nil {
		t.Fatal(err)
	}
	// Rows 5 and 6 have long images, in which every column is tested.
	f.Exec(t,
		`INSERT INTO a VALUES (1, NULL, 'null', 'null')`,
		`INSERT INTO pt VALUES (1, 'null', NULL), (2, NULL, '"null"')`,
		`ALTER TABLE a DROP COLUMN gone`,
		`INSERT INTO a VALUES (2, 'null', NULL)`,
		`INSERT INTO a VALUES (5, '[1]', '{}', repeat('x', 2000))`,
		`CREATE DOMAIN nn AS jsonb NOT NULL`,
		`UPDATE a SET jb = '{}' WHERE id < 5`,
		`ALTER TABLE a ALTER COLUMN jb TYPE nn`,
		`INSERT INTO a VALUES (3, NULL, 'null')`,
		`INSERT INTO a VALUES (6, '[1]', 'null', repeat('x', 2000))`,
		`ALTER TABLE a RENAME COLUMN j TO j2`,
		`INSERT INTO a VALUES (4, NULL, 'null')`,
		`UPDATE a SET jb = 'null' WHERE id = 1`)
	rows, err := f.PG.Query(context.Background(), `SELECT tbl || ' ' || op::text || ' ' || coalesce(nulls::text, 'NULL') FROM sluice.changelog ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`"public"."a" I {"j": true, "jb": false, "gone": false}`,
		`"public"."pt" I {"j": false, "jb": true}`,
		`"public"."pt" I {"j": true}`,
		`"public"."a" I {"j": false, "jb": true}`,
		`"public"."a" I {"j": false, "jb": false, "gone": true}`,
		`"public"."a" U {"j": true}`, `"public"."a" U {"j": false}`,
		// jb is a domain refusing NULL now.
		`"public"."a" I {"j": true, "jb": false}`,
		`"public"."a" I {"j": false, "jb": false}`,
		`"public"."a" I {"jb": false}`,
		`"public"."a" U {"jb": false}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("changelog:\n got %q\nwant %q", got, want)
	}
}
