package schema

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func strp(s string) *string { return &s }

// pgCatalog is a PostgreSQL source catalog with a column of every type the
// type map knows, the ways a column can be declared (NOT NULL, constant and
// other defaults, collations, generated, identity, an enum, a domain, an
// array) and every kind of index and foreign key.
func pgCatalog() []*Table {
	customers := &Table{
		Name:       sluice.TableName{Schema: "public", Name: "customers"},
		Columns:    []Column{{Name: "id", Type: "bigint"}, {Name: "email", Type: "character varying(200)"}, {Name: "name", Type: "text", Nullable: true}},
		PrimaryKey: []string{"id"},
		Indexes:    []Index{{Name: "customers_email_key", Columns: []string{"email"}, Unique: true, Constraint: true, Method: "btree"}},
	}
	every := &Table{
		Name: sluice.TableName{Schema: "public", Name: "every_type"},
		Columns: []Column{
			{Name: "id", Type: "bigint", AutoIncrement: true},
			{Name: "customer_id", Type: "bigint", Nullable: true},
			{Name: "i2", Type: "smallint", Nullable: true},
			{Name: "i4", Type: "integer", Default: strp("0")},
			{Name: "i8", Type: "bigint", Nullable: true},
			{Name: "num", Type: "numeric(12,2)", Nullable: true, Default: strp("1.50")},
			{Name: "num_wide", Type: "numeric(65,30)", Nullable: true},
			{Name: "r", Type: "real", Nullable: true},
			{Name: "d", Type: "double precision", Nullable: true},
			{Name: "b", Type: "boolean", Nullable: true, Default: strp("true")},
			{Name: "code", Type: "character varying(40)", Default: strp("it's")},
			{Name: "long_vc", Type: "character varying(1000)", Nullable: true},
			{Name: "huge_vc", Type: "character varying(20000)", Nullable: true},
			{Name: "unbounded_vc", Type: "character varying", Nullable: true},
			{Name: "ch", Type: "character(6)", Nullable: true},
			{Name: "t", Type: "text", Nullable: true, Collation: `"C"`},
			{Name: "by", Type: "bytea", Nullable: true, Default: strp(`\x00ff`)},
			{Name: "u", Type: "uuid", Nullable: true, DefaultExpr: "gen_random_uuid()"},
			{Name: "dt", Type: "date", Nullable: true, Default: strp("2024-02-29")},
			{Name: "ts", Type: "timestamp(3) without time zone", Nullable: true},
			{Name: "tstz", Type: "timestamp with time zone", Nullable: true, DefaultExpr: "now()"},
			{Name: "tm", Type: "time without time zone", Nullable: true},
			{Name: "j", Type: "json", Nullable: true},
			{Name: "jb", Type: "jsonb", Nullable: true},
			{Name: "iv", Type: "interval", Nullable: true},
			{Name: "arr", Type: "integer[]", Nullable: true},
			{Name: "addr", Type: "inet", Nullable: true},
			{Name: "mood", Type: "mood", Nullable: true, UserType: "public.mood", Kind: "e", Labels: []string{"sad", "o'k", "happy"}},
			{Name: "moods", Type: "mood[]", Nullable: true, UserType: "public.mood", Kind: "e", Labels: []string{"sad", "o'k", "happy"}},
			{Name: "qty", Type: "posint", Nullable: true, UserType: "public.posint", Kind: "d", Domain: &Domain{Base: "integer", Constraints: []string{"CHECK ((VALUE > 0))"}}},
			{Name: "doubled", Type: "integer", Nullable: true, Generated: "(i4 * 2)", Stored: true},
			{Name: "code_len", Type: "integer", Nullable: true, Generated: "char_length((code)::text)", Stored: true},
			{Name: "halved", Type: "numeric", Nullable: true, Generated: "(num / (2)::numeric)", Stored: true},
		},
		PrimaryKey: []string{"id"},
		Indexes: []Index{
			{Name: "every_type_code_key", Columns: []string{"code"}, Unique: true, Method: "btree", Definition: "CREATE UNIQUE INDEX every_type_code_key ON public.every_type USING btree (code)"},
			{Name: "every_type_customer_idx", Columns: []string{"customer_id", "dt"}, Method: "btree", Definition: "CREATE INDEX every_type_customer_idx ON public.every_type USING btree (customer_id, dt)"},
			{Name: "every_type_t_idx", Columns: []string{"t"}, Method: "btree", Definition: "CREATE INDEX every_type_t_idx ON public.every_type USING btree (t)"},
			{Name: "every_type_t_key", Columns: []string{"t"}, Unique: true, Method: "btree", Definition: "CREATE UNIQUE INDEX every_type_t_key ON public.every_type USING btree (t)"},
			{Name: "every_type_jb_idx", Columns: []string{"jb"}, Method: "gin", Definition: "CREATE INDEX every_type_jb_idx ON public.every_type USING gin (jb)"},
			{Name: "every_type_lower_idx", Method: "btree", Partial: true, Definition: "CREATE INDEX every_type_lower_idx ON public.every_type USING btree (lower(code))"},
			{Name: "every_type_code_len_idx", Columns: []string{"code_len"}, Method: "btree", Definition: "CREATE INDEX every_type_code_len_idx ON public.every_type USING btree (code_len)"},
			{Name: "every_type_halved_idx", Columns: []string{"halved"}, Method: "btree", Definition: "CREATE INDEX every_type_halved_idx ON public.every_type USING btree (halved)"},
		},
		ForeignKeys: []ForeignKey{
			{Name: "every_type_customer_fkey", Columns: []string{"customer_id"}, RefTable: customers.Name, RefColumns: []string{"id"}, OnDelete: "CASCADE", OnUpdate: "NO ACTION"},
			{Name: "every_type_elsewhere_fkey", Columns: []string{"i8"}, RefTable: sluice.TableName{Schema: "public", Name: "elsewhere"}, RefColumns: []string{"id"}, OnDelete: "SET NULL", OnUpdate: "CASCADE"},
		},
	}
	return []*Table{customers, every}
}

// myCatalog is a MariaDB source catalog with a column of every MySQL type
// the type map knows.
func myCatalog() []*Table {
	customers := &Table{
		Name:       sluice.TableName{Name: "customers"},
		Columns:    []Column{{Name: "id", Type: "bigint(20)", AutoIncrement: true}, {Name: "email", Type: "varchar(200)", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"}},
		PrimaryKey: []string{"id"},
		Indexes:    []Index{{Name: "email", Columns: []string{"email"}, Unique: true, Method: "BTREE"}},
		Charset:    "utf8mb4", Collation: "utf8mb4_general_ci",
	}
	every := &Table{
		Name: sluice.TableName{Name: "every_type"},
		Columns: []Column{
			{Name: "id", Type: "bigint(20) unsigned", AutoIncrement: true},
			{Name: "customer_id", Type: "bigint(20)", Nullable: true},
			{Name: "ti", Type: "tinyint(4)", Nullable: true},
			{Name: "flag", Type: "tinyint(1)", Default: strp("0")},
			{Name: "si", Type: "smallint(5) unsigned", Nullable: true},
			{Name: "mi", Type: "mediumint(9)", Nullable: true},
			{Name: "i", Type: "int(11)", Default: strp("0")},
			{Name: "iu", Type: "int(10) unsigned", Nullable: true},
			{Name: "bu", Type: "bigint(20) unsigned", Nullable: true},
			{Name: "dec", Type: "decimal(12,2)", Nullable: true, Default: strp("1.50")},
			{Name: "f", Type: "float", Nullable: true},
			{Name: "dbl", Type: "double", Nullable: true},
			{Name: "c", Type: "char(6)", Nullable: true, Charset: "latin1", Collation: "latin1_swedish_ci"},
			{Name: "vc", Type: "varchar(40)", Charset: "utf8mb4", Collation: "utf8mb4_bin", Default: strp("it's")},
			{Name: "tt", Type: "tinytext", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "tx", Type: "text", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "mt", Type: "mediumtext", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "lt", Type: "longtext", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "js", Type: "longtext", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_bin", JSON: true},
			{Name: "bin", Type: "binary(16)", Nullable: true},
			{Name: "vb", Type: "varbinary(200)", Nullable: true},
			{Name: "bl", Type: "blob", Nullable: true},
			{Name: "lb", Type: "longblob", Nullable: true},
			{Name: "bt", Type: "bit(3)", Nullable: true},
			{Name: "dt", Type: "date", Nullable: true},
			{Name: "dtm", Type: "datetime(6)", Nullable: true},
			{Name: "ts", Type: "timestamp(3)", Nullable: true, DefaultExpr: "current_timestamp(3)"},
			{Name: "tm", Type: "time(2)", Nullable: true},
			{Name: "y", Type: "year(4)", Nullable: true},
			{Name: "en", Type: "enum('a','b''c')", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "st", Type: "set('x','y')", Nullable: true, Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "u", Type: "uuid", Nullable: true},
			{Name: "total", Type: "int(11)", Nullable: true, Generated: "`i` * 2", Stored: true},
			{Name: "vc_len", Type: "int(11)", Nullable: true, Generated: "char_length(`vc`)"},
			{Name: "f_twice", Type: "double", Nullable: true, Generated: "`f` * 2"},
		},
		PrimaryKey: []string{"id"},
		Indexes: []Index{
			{Name: "vc", Columns: []string{"vc"}, Unique: true, Method: "BTREE"},
			{Name: "tx_prefix", Columns: []string{"tx", "dt"}, Prefix: []int{20, 0}, Method: "BTREE"},
			{Name: "tt_words", Columns: []string{"tt"}, Method: "FULLTEXT"},
			{Name: "customer_id", Columns: []string{"customer_id"}, Method: "BTREE"},
			{Name: "vc_len", Columns: []string{"vc_len"}, Method: "BTREE"},
			{Name: "f_twice", Columns: []string{"f_twice"}, Method: "BTREE"},
		},
		ForeignKeys: []ForeignKey{
			{Name: "every_type_ibfk_1", Columns: []string{"customer_id"}, RefTable: sluice.TableName{Name: "customers"}, RefColumns: []string{"id"}, OnDelete: "CASCADE", OnUpdate: "RESTRICT"},
		},
		Charset: "utf8mb4", Collation: "utf8mb4_general_ci",
	}
	return []*Table{customers, every}
}

// TestPlanGolden: the DDL generated for every engine pair from catalogs
// that use every type the type map knows (go test -update rewrites the
// files; review the diff).
func TestPlanGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		cat  func() []*Table
		opt  PlanOptions
	}{
		{"postgres_to_postgres", pgCatalog, PlanOptions{From: Postgres, To: Postgres, Flavor: FlavorPostgres, OmitsGenerated: true}},
		{"postgres_to_mariadb", pgCatalog, PlanOptions{From: Postgres, To: MySQL, Flavor: FlavorMariaDB, OmitsGenerated: true}},
		{"postgres_to_mysql", pgCatalog, PlanOptions{From: Postgres, To: MySQL, Flavor: FlavorMySQL, OmitsGenerated: true}},
		{"mariadb_to_postgres", myCatalog, PlanOptions{From: MySQL, To: Postgres, Flavor: FlavorPostgres}},
		{"mariadb_to_mariadb", myCatalog, PlanOptions{From: MySQL, To: MySQL, Flavor: FlavorMariaDB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := BuildPlan(tc.cat(), tc.opt)
			if err != nil {
				t.Fatalf("BuildPlan: %v", err)
			}
			golden(t, filepath.Join("testdata", "plan_"+tc.name+".sql"), p.Text())
		})
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s", path, got)
	}
}

// TestPlanRefusals: a column no target type holds exactly is refused, the
// error naming the column, the cause and the choices; the other tables are
// planned.
func TestPlanRefusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to Engine
		col      Column
		key      bool
		want     []string
	}{
		{"numeric without precision", Postgres, MySQL, Column{Name: "amount", Type: "numeric"}, false,
			[]string{"column public.t.amount", "numeric without precision", "declare the source column numeric(p,s)", "longtext"}},
		{"numeric beyond DECIMAL", Postgres, MySQL, Column{Name: "amount", Type: "numeric(70,2)"}, false,
			[]string{"column public.t.amount", "numeric(70,2)", "decimal(65,30)"}},
		{"text key", Postgres, MySQL, Column{Name: "k", Type: "text"}, true,
			[]string{"column public.t.k", "no length limit", "varchar(n) with n ≤ 768"}},
		{"long varchar key", Postgres, MySQL, Column{Name: "k", Type: "character varying(1000)"}, true,
			[]string{"column public.t.k", "varchar(1000) key column", "n ≤ 768"}},
		{"geometry", MySQL, Postgres, Column{Name: "shape", Type: "geometry"}, false,
			[]string{"column public.t.shape", "geometry", "create the target table yourself"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := &Table{Name: sluice.TableName{Schema: "public", Name: "t"}, Columns: []Column{{Name: "id", Type: "integer"}, tc.col}, PrimaryKey: []string{"id"}}
			if tc.key {
				bad.Columns = bad.Columns[1:]
				bad.PrimaryKey = []string{tc.col.Name}
			}
			good := &Table{Name: sluice.TableName{Schema: "public", Name: "fine"}, Columns: []Column{{Name: "id", Type: "integer"}}, PrimaryKey: []string{"id"}}
			if tc.from == MySQL {
				good.Columns[0].Type = "int(11)"
			}
			p, err := BuildPlan([]*Table{bad, good}, PlanOptions{From: tc.from, To: tc.to, Flavor: FlavorOf(tc.to, "10.11.6-MariaDB")})
			if err == nil {
				t.Fatalf("planned %s: %s", tc.col.Type, p.Text())
			}
			var se *Error
			if !errors.As(err, &se) || se.Column != tc.col.Name {
				t.Errorf("error %v does not name the column as an *Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if len(p.Tables) != 1 || p.Tables[0].Source.Name != "fine" {
				t.Errorf("the table that can be created is not planned: %+v", p.Tables)
			}
		})
	}
}

// TestPGConstant: which default expressions are constants, and their
// values.
func TestPGConstant(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string
		ok   bool
	}{
		{"'abc'::text", "abc", true},
		{"'it''s'::character varying", "it's", true},
		{"42", "42", true},
		{"(-1)", "-1", true},
		{"1.5", "1.5", true},
		{"'1.50'::numeric", "1.50", true},
		{"true", "true", true},
		{"'2024-02-29'::date", "2024-02-29", true},
		{`'\x00ff'::bytea`, `\x00ff`, true},
		{"'{1,2}'::integer[]", "{1,2}", true},
		{"now()", "", false},
		{"nextval('t_id_seq'::regclass)", "", false},
		{"CURRENT_TIMESTAMP", "", false},
		{"('a'::text || 'b'::text)", "", false},
		{"'x'::text || 'y'::text", "", false},
	} {
		got, ok := pgConstant(tc.expr)
		if ok != tc.ok || got != tc.want {
			t.Errorf("pgConstant(%q) = %q, %v; want %q, %v", tc.expr, got, ok, tc.want, tc.ok)
		}
	}
}

// TestMyDefault: information_schema's COLUMN_DEFAULT as MariaDB and MySQL
// print it.
func TestMyDefault(t *testing.T) {
	for _, tc := range []struct {
		f         Flavor
		def       string
		generated bool
		want      *string
		expr      string
	}{
		{FlavorMariaDB, "'abc'", false, strp("abc"), ""},
		{FlavorMariaDB, "'it''s'", false, strp("it's"), ""},
		{FlavorMariaDB, `'a\\b'`, false, strp(`a\b`), ""},
		{FlavorMariaDB, "5", false, strp("5"), ""},
		{FlavorMariaDB, "-1.5", false, strp("-1.5"), ""},
		{FlavorMariaDB, "NULL", false, nil, ""},
		{FlavorMariaDB, "current_timestamp()", false, nil, "current_timestamp()"},
		{FlavorMariaDB, "uuid()", false, nil, "uuid()"},
		{FlavorMySQL, "abc", false, strp("abc"), ""},
		{FlavorMySQL, "CURRENT_TIMESTAMP", true, nil, "CURRENT_TIMESTAMP"},
		{FlavorMySQL, "CURRENT_TIMESTAMP", false, nil, "CURRENT_TIMESTAMP"},
		{FlavorMySQL, "(rand())", true, nil, "(rand())"},
	} {
		got, expr := myDefault(tc.f, tc.def, tc.generated)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want || expr != tc.expr {
			g := "<nil>"
			if got != nil {
				g = *got
			}
			t.Errorf("myDefault(%s, %q) = %q, %q; want %v, %q", tc.f, tc.def, g, expr, tc.want, tc.expr)
		}
	}
}
