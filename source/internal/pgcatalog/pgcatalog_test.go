package pgcatalog

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestCollations: only columns with a nondeterministic collation are
// named; deterministic collations (the default, "C", a deterministic ICU
// one) and types without a collation compare bytes.
func TestCollations(t *testing.T) {
	ctx := context.Background()
	d := dbtest.PGEngine.Database(t,
		`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE COLLATION de_icu (provider = icu, locale = 'de')`,
		`CREATE DOMAIN ci_text AS text COLLATE ci`,
		`CREATE TABLE c (id text COLLATE ci PRIMARY KEY, plain text, posix text COLLATE "C", de text COLLATE de_icu,
			dom ci_text, arr varchar(5)[] COLLATE ci, n numeric, dropped text COLLATE ci)`,
		`ALTER TABLE c DROP COLUMN dropped`)
	conn, db := d.PG, d.Name
	name := sluice.TableName{Schema: "public", Name: "c"}
	oid, _, err := Table(ctx, conn, db, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Collations(ctx, conn, name, oid)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"id": "ci", "dom": "ci", "arr": "ci"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Collations = %v, want %v", got, want)
	}
}

// TestEnumLabels: an enum column's labels in their order (not the order
// they were added in), quoted as a MySQL ENUM's members; a domain over an
// enum has its labels; an enum array and other types have none.
func TestEnumLabels(t *testing.T) {
	ctx := context.Background()
	d := dbtest.PGEngine.Database(t,
		`CREATE TYPE mood AS ENUM ('sad', 'happy')`,
		`ALTER TYPE mood ADD VALUE 'ok' BEFORE 'happy'`,
		`CREATE TYPE odd AS ENUM ('it''s', 'back\slash', 'Ünï', 'trailing ')`,
		`CREATE DOMAIN mood_d AS mood`,
		`CREATE TABLE e (id int PRIMARY KEY, m mood, o odd, md mood_d, ma mood[], t text)`)
	name := sluice.TableName{Schema: "public", Name: "e"}
	oid, _, err := Table(ctx, d.PG, d.Name, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := EnumLabels(ctx, d.PG, name, oid)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"m": `'sad','ok','happy'`, "o": `'it''s','back\slash','Ünï','trailing '`, "md": `'sad','ok','happy'`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("EnumLabels = %v, want %v", got, want)
	}
}
