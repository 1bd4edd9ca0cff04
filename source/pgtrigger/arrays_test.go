package pgtrigger

import (
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

// arrayDDL is a table with array columns of every kind the capture must
// carry with their bounds: a scalar element type, text with quotes and
// NULLs, an enum, a composite holding an array, a domain over an array,
// several dimensions, a timestamptz (whose text depends on session
// settings) and a json column, so that the json nulls and the bounds are
// recorded side by side.
var arrayDDL = []string{
	`CREATE TYPE mood AS ENUM ('sad', 'Ünï ''q''')`,
	`CREATE TYPE pair AS (x int, ys text[])`,
	`CREATE DOMAIN ints AS int[]`,
	`CREATE TABLE arr (id int PRIMARY KEY, a int[], t text[], m mood[], p pair[], d ints, g int[], z timestamptz[], j json)`,
}

// arrayRows are rows of arr as SQL VALUES lists: lower bounds other than 1
// (negative, zero, past 1, in some dimensions only), and rows whose arrays
// start at 1 or are empty or NULL.
var arrayRows = []string{
	`1, '[0:1]={7,8}', '[-2:0]={"a\"b",NULL,"x,y"}', '[5:6]={sad,"Ünï ''q''"}', '[0:0]={"(1,\"{p,q}\")"}', '[3:4]={1,2}',
		'[0:1][2:3]={{1,NULL},{3,4}}', '[0:0]={"2024-01-02 03:04:05.5+02"}', 'null'`,
	`2, '{1,2}', '{"{}",""," x "}', '{sad}', '{"(,)"}', '{5}', '{{1},{2}}', '{"1999-12-31 23:59:59+00"}', NULL`,
	`3, '{}', NULL, '{}', NULL, '{}', '[1:1][0:1]={{1,2}}', '{}', '[]'`,
	`4, '[-2147483648:-2147483647]={NULL,NULL}', '[2:2]={"back\\slash"}', NULL, '[7:7]={NULL}', NULL, '[1:1][1:1][0:0]={{{9}}}', NULL, '{}'`,
}

// sourceRows is every row of table arr on the source as the reader's
// session prints it, keyed by id.
func sourceRows(t *testing.T, f *fixture, cols []string) map[string][]string {
	t.Helper()
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = ident(c) + "::text"
	}
	conn, err := pgx.ConnectConfig(context.Background(), mustConnConfig(t, f.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT ARRAY[`+strings.Join(exprs, ", ")+`] FROM arr`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for rows.Next() {
		var vals []*string
		if err := rows.Scan(&vals); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = "NULL"
			if v != nil {
				row[i] = *v
			}
		}
		out[row[0]] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func columnNames(t *sluice.Table) []string {
	out := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = c.Name
	}
	return out
}

func mustConnConfig(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	c, err := readerConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// streamedRows applies row changes to a map of rows keyed by the first
// column, as a target would.
func streamedRows(changes []sluice.Change) map[string][]string {
	out := map[string][]string{}
	for _, c := range changes {
		if c.Op == sluice.OpDelete {
			delete(out, c.Key[0].String())
			continue
		}
		if c.Op == sluice.OpUpdate {
			delete(out, c.Key[0].String())
		}
		row := make([]string, len(c.Row))
		for i, v := range c.Row {
			row[i] = "NULL"
			if !v.Null {
				row[i] = v.String()
			}
		}
		out[row[0]] = row
	}
	return out
}

// compareRows compares every row of two tables, value by value.
func compareRows(t *testing.T, cols []string, got, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d rows streamed, source has %d", len(got), len(want))
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("row id=%s missing from the stream", id)
			continue
		}
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("row id=%s column %s: streamed %s, source holds %s", id, cols[i], g[i], w[i])
			}
		}
	}
}

// TestArrayBounds checks that arrays reach the reader with their bounds:
// row_to_json writes every array as a JSON array starting at 1.
func TestArrayBounds(t *testing.T) {
	f := newFixture(t, arrayDDL...)
	r := f.open(t, Config{Tables: dbtest.Tables("arr"), Install: true}, sluice.Position{})
	cols := columnNames(r.Tables()[0])
	for _, row := range arrayRows {
		f.Exec(t, `INSERT INTO arr VALUES (`+row+`)`)
	}
	f.Exec(t,
		// Bounds change, the key too; then an update that leaves them.
		`UPDATE arr SET id = 12, a = '[9:9]={1}', g = '{{1},{2}}' WHERE id = 2`,
		`UPDATE arr SET t = '{x}' WHERE id = 1`,
		`DELETE FROM arr WHERE id = 3`)
	got := streamedRows(collect(t, r, len(arrayRows)+3, 100))
	compareRows(t, cols, got, sourceRows(t, f, cols))
}

// TestArrayBoundsUpgrade checks the upgrade of an install made before the
// capture recorded bounds: Install adds the changelog column, replaces the
// function and the capture trigger of the table with array columns only;
// the rows the old capture wrote read as they did (bounds lost, nothing
// else), those captured after the upgrade exactly.
func TestArrayBoundsUpgrade(t *testing.T) {
	f := newFixture(t, append(slices.Clone(arrayDDL), `CREATE TABLE plain (id int PRIMARY KEY, v text)`)...)
	ctx := context.Background()
	tbls := dbtest.Tables("arr", "plain")
	installPreBounds(t, f, tbls)
	f.Exec(t, `INSERT INTO arr (id, a, j) VALUES (100, '[0:1]={7,8}', 'null')`)

	_, err := Open(ctx, f.URL, Config{Tables: tbls, Logger: slog.New(slog.DiscardHandler)}, sluice.Position{})
	if err == nil || !strings.Contains(err.Error(), "array columns") || !strings.Contains(err.Error(), "sluice source install") {
		t.Fatalf("Open on the install without bounds: %v, want an error naming the array columns and the install", err)
	}
	before := triggerOIDs(t, f)
	if err := Install(ctx, f.PG, "", tbls); err != nil {
		t.Fatalf("Install over the install without bounds: %v", err)
	}
	after := triggerOIDs(t, f)
	for name, oid := range before {
		if recreated := after[name] != oid; recreated != (name == "arr sluice_capture") {
			t.Errorf("trigger %s: re-created %v by the upgrade, want %v", name, recreated, !recreated)
		}
	}
	if missing, err := missingObjects(ctx, f.PG, DefaultSchema, tbls); err != nil || len(missing) > 0 {
		t.Fatalf("missing after the upgrade = %q, %v; want nothing", missing, err)
	}

	r := f.open(t, Config{Tables: tbls}, sluice.Position{})
	cols := columnNames(r.Tables()[0])
	for _, row := range arrayRows {
		f.Exec(t, `INSERT INTO arr VALUES (`+row+`)`)
	}
	f.Exec(t, `INSERT INTO plain VALUES (1, 'x')`)
	changes := collect(t, r, len(arrayRows)+2, 100)
	old := changes[0]
	if got := old.Row[1].String(); got != "{7,8}" {
		t.Errorf("row captured before the upgrade: a = %s, want {7,8} (read as the old capture wrote it)", got)
	}
	if got := old.Row[8].String(); got != "null" {
		t.Errorf("row captured before the upgrade: j = %s, want null", got)
	}
	var arr []sluice.Change
	for _, c := range changes[1:] {
		if c.Table.Name.Name == "arr" {
			arr = append(arr, c)
		}
	}
	want := sourceRows(t, f, cols)
	delete(want, "100")
	compareRows(t, cols, streamedRows(arr), want)
}

// installPreBounds leaves the database as the sluice before the capture
// recorded array bounds installed it: the changelog without dims, the
// capture function as it was, and capture triggers with the table, its
// key and its nullable json columns only.
func installPreBounds(t *testing.T, f *fixture, tbls []sluice.TableName) {
	t.Helper()
	ctx := context.Background()
	if err := Install(ctx, f.PG, "", tbls); err != nil {
		t.Fatalf("Install: %v", err)
	}
	old := function{name: captureFunc, set: "SET extra_float_digits = 3\nSET IntervalStyle = postgres\n",
		body: fmt.Sprintf(preBoundsCaptureBody, ident(DefaultSchema, changelogTable))}
	f.Exec(t, `ALTER TABLE sluice.changelog DROP COLUMN IF EXISTS dims`, old.create(DefaultSchema))
	for _, tn := range normalize(tbls) {
		info, err := lookupTable(ctx, f.PG, f.Name, tn)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{quoteLiteral(ident(tn.Schema, tn.Name))}
		for _, k := range info.keyNames() {
			args = append(args, quoteLiteral(k))
		}
		if js := info.jsonNullable(); len(js) > 0 {
			args = append(args, "''")
			for _, j := range js {
				args = append(args, quoteLiteral(j))
			}
		}
		f.Exec(t, fmt.Sprintf(`DROP TRIGGER sluice_capture ON %s`, ident(tn.Schema, tn.Name)),
			fmt.Sprintf(`CREATE TRIGGER sluice_capture AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION sluice.capture(%s)`,
				ident(tn.Schema, tn.Name), strings.Join(args, ", ")))
	}
}

// preBoundsCaptureBody is the capture function of the sluice that did
// not record array bounds (it told JSON nulls apart already).
const preBoundsCaptureBody = `
DECLARE
	json_at int := array_position(TG_ARGV, '');
	new_row json;
	old_row json;
	old_key json;
	img text;
	col text;
	cols text[];
	is_null boolean;
	nulls jsonb;
BEGIN
	IF json_at IS NULL THEN
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
	END IF;
	IF TG_OP <> 'DELETE' THEN
		new_row := row_to_json(NEW);
		img := new_row::text;
		FOREACH col IN ARRAY TG_ARGV[json_at + 1:] LOOP
			IF strpos(img, to_json(col)::text || ':null') > 0 THEN
				cols := cols || col;
			END IF;
		END LOOP;
		IF cols IS NOT NULL THEN
			FOREACH col IN ARRAY cols LOOP
				nulls := coalesce(nulls, '{}') || jsonb_build_object(col, NEW *= json_populate_record(NEW, json_build_object(col, NULL)));
			END LOOP;
		END IF;
	END IF;
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %[1]s (tbl, op, data, nulls) VALUES (TG_ARGV[0], 'I', new_row, nulls);
		RETURN NULL;
	END IF;
	old_row := row_to_json(OLD);
	SELECT json_object_agg(k, old_row -> k) INTO old_key FROM unnest(TG_ARGV[1:json_at - 1]) AS k;
	IF TG_OP = 'UPDATE' THEN
		INSERT INTO %[1]s (tbl, op, key, data, nulls) VALUES (TG_ARGV[0], 'U', old_key, new_row, nulls);
	ELSE
		INSERT INTO %[1]s (tbl, op, key) VALUES (TG_ARGV[0], 'D', old_key);
	END IF;
	RETURN NULL;
END
`

// TestArrayBoundsAfterAlter checks that no later ALTER TABLE makes the
// capture of array bounds fail the application's writes, and that what it
// records stays right: a dropped column is never named in a statement, a
// column no longer an array is skipped, and a domain whose check depends
// on the bounds (which makes the cheap test raise) is asked directly.
func TestArrayBoundsAfterAlter(t *testing.T) {
	f := newFixture(t, `CREATE TABLE a (id int PRIMARY KEY, x int[], gone int[], z int[])`)
	if err := Install(context.Background(), f.PG, "", dbtest.Tables("a")); err != nil {
		t.Fatal(err)
	}
	f.Exec(t,
		`INSERT INTO a VALUES (1, '[0:1]={1,2}', '[2:2]={3}', '{4}')`,
		`ALTER TABLE a DROP COLUMN gone`,
		`INSERT INTO a VALUES (2, '[0:1]={1,2}', '[-1:-1]={4}')`,
		`ALTER TABLE a ALTER COLUMN x TYPE text`,
		`INSERT INTO a VALUES (3, '[0:1]={1,2}', '[3:3]={4}')`,
		`CREATE DOMAIN from0 AS int[] CHECK (array_lower(VALUE, 1) = 0)`,
		`UPDATE a SET z = '[0:0]={4}'`,
		`ALTER TABLE a ALTER COLUMN z TYPE from0`,
		`INSERT INTO a VALUES (4, 'x', '[0:1]={5,6}')`)
	rows, err := f.PG.Query(context.Background(), `SELECT op::text || ' ' || coalesce(dims::text, 'NULL') FROM sluice.changelog ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`I {"x": "[0:1]", "gone": "[2:2]"}`,
		`I {"x": "[0:1]", "z": "[-1:-1]"}`,
		`I {"z": "[3:3]"}`,
		`U {"z": "[0:0]"}`, `U {"z": "[0:0]"}`, `U {"z": "[0:0]"}`,
		`I {"z": "[0:1]"}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("changelog:\n got %q\nwant %q", got, want)
	}
}
