package workload

import (
	"fmt"
	"strings"
)

// The type-fidelity corpus: for every pair of column types sluice's
// cross-engine type map accepts, the edge values of the source type, and
// how to tell, with SQL run on each database, that the target holds
// exactly what the source holds. The expected value is computed by the
// source database from its own value (PostgreSQL's output function, MySQL's
// CAST(… AS CHAR), or the value in binary form), never by sluice's code,
// so that a conversion bug in sluice shows up as a difference.
// integration/typefidelity_test.go carries every value through a stream
// and checks it; the randomized workload draws its corpus table's values
// from here.

// A CorpusPair is one source column type, the target column type that
// holds its values exactly, and the source's edge values.
type CorpusPair struct {
	// Name is the column's name in the corpus table.
	Name string
	// Source and Target are the column's SQL types on the source's engine
	// and on the target's.
	Source, Target string
	// Values are source values the target holds exactly, as SQL literals
	// of the source's engine.
	Values []string
	// Refused are source values the target type has no exact home for:
	// sluice must stop on them with an error naming the table, the column
	// and the row's key, never write something else. SQL literals too.
	Refused []string
	// Want is an SQL expression on the source over the column ({c}) whose
	// value is what the target must hold; Read is one on the target that
	// gives what it holds in the same form. Compare says how the two
	// results compare.
	Want, Read string
	Compare    CorpusCompare
}

// CorpusCompare is how the results of Want and Read compare.
type CorpusCompare uint8

const (
	// CompareText: the two results' bytes are equal (text or bytes).
	CompareText CorpusCompare = iota
	// CompareFloat: both results are floats, read in binary, with equal
	// bits (the sign of a zero counts; any NaN equals any NaN).
	CompareFloat
	// CompareJSON: both results are JSON documents with equal values
	// (numbers as exact decimals, objects as sets of members).
	CompareJSON
)

// Expr is e (Want or Read) over the column named col.
func Expr(e, col string) string { return strings.ReplaceAll(e, "{c}", col) }

// CorpusSetup is what must exist on a database of engine e before a
// corpus table of a source of engine source is created there: the
// PostgreSQL enum type of a PostgreSQL source's corpus.
func CorpusSetup(source, e Engine) []string {
	if e == Postgres && source == Postgres {
		return []string{"CREATE TYPE corpus_mood AS ENUM ('sad', 'ok', 'happy', 'Ünï ''q''')"}
	}
	return nil
}

// Corpus returns the corpus of the pair source → target. Between two
// databases of one engine each pair is the source type on both sides.
func Corpus(source, target Engine) []CorpusPair {
	switch {
	case source == Postgres && target == MySQL:
		return pgToMyCorpus
	case source == MySQL && target == Postgres:
		return myToPGCorpus
	case source == Postgres:
		return sameEngine(pgToMyCorpus, pgText)
	}
	return sameEngine(myToPGCorpus, myText)
}

// sameEngine turns a cross-engine corpus into one between two databases
// of the source's engine: the source type on both sides, compared by
// text (floats in binary). The values refused across engines are left out
// (dbtest's comparison cannot read MariaDB's zero dates).
func sameEngine(cs []CorpusPair, text string) []CorpusPair {
	out := make([]CorpusPair, 0, len(cs))
	for _, c := range cs {
		c.Target = c.Source
		c.Refused = nil
		switch c.Compare {
		case CompareFloat:
			c.Read = c.Want
		case CompareJSON:
			c.Want, c.Read = text, text
			c.Compare = CompareText
		default:
			c.Want, c.Read = text, text
		}
		out = append(out, c)
	}
	return out
}

// The forms the source's own text is computed in.
const (
	// pgText is what PostgreSQL prints for a value: its type's output
	// function, as psql, COPY and pg_dump give it (format's %s calls it;
	// value::text differs for inet, whose cast always shows the netmask).
	pgText = "CASE WHEN {c} IS NOT NULL THEN format('%s', {c}) END" // format gives '' for NULL
	// myText is what MySQL prints for a value.
	myText = "CAST({c} AS CHAR)"
	// myBytes: a binary string as it is.
	myBytes = "{c}"
)

var pgToMyCorpus = []CorpusPair{
	{Name: "c_inet", Source: "inet", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'::1'", "'10.0.0.1'", "'10.0.0.1/8'", "'10.0.0.0/8'", "'192.168.1.5/32'", "'::1/128'", "'2001:db8::1/64'",
			"'::ffff:1.2.3.4'", "'0.0.0.0/0'", "'255.255.255.255'", "'::'", "'2001:db8::/32'"}},
	{Name: "c_cidr", Source: "cidr", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'10.0.0.0/8'", "'192.168.1.5/32'", "'2001:db8::/32'", "'::1/128'", "'0.0.0.0/0'", "'10.1.2'"}},
	{Name: "c_mac", Source: "macaddr", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'08:00:2b:01:02:03'", "'08-00-2B-01-02-03'", "'0800.2b01.0203'", "'ff:ff:ff:ff:ff:ff'", "'00:00:00:00:00:00'"}},
	{Name: "c_mac8", Source: "macaddr8", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'08:00:2b:01:02:03:04:05'", "'08:00:2b:01:02:03'"}},
	{Name: "c_money", Source: "money", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'1234.56'", "'-92233720368547758.08'", "'92233720368547758.07'", "'0'", "'-0.01'"}},
	{Name: "c_bit", Source: "bit(5)", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"B'10101'", "B'00000'", "B'11111'"}},
	{Name: "c_varbit", Source: "bit varying(70)", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"B''", "B'1'", "B'0'", "B'" + strings.Repeat("10", 35) + "'"}},
	{Name: "c_timetz", Source: "time(6) with time zone", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'12:00:00+05:30'", "'23:59:59.999999-15:59'", "'00:00:00+00'", "'24:00:00-01'", "'13:14:15.5+14'"}},
	{Name: "c_interval", Source: "interval", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'1 year 2 mons 3 days 04:05:06.789'", "'-1 days +02:00:00'", "'178000000 years'", "'1 mon -1 days'",
			"'-00:00:00.000001'", "'0'", "'838:59:59'", "'-2147483648 days'"}},
	{Name: "c_numeric", Source: "numeric", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'NaN'", "'Infinity'", "'-Infinity'", "'0.000000000000000000000000000000000000001'",
			"'-123456789012345678901234567890.123456789'", "'1e100'", "'1.50'", "'-0'"}},
	{Name: "c_dec", Source: "numeric(65,30)", Target: "decimal(65,30)", Want: pgText, Read: myText,
		Values: []string{"'" + nines(35) + "." + nines(30) + "'", "'-" + nines(35) + "." + nines(30) + "'",
			"'0.000000000000000000000000000001'", "'-0.5'", "'0'"},
		Refused: []string{"'NaN'"}}, // a numeric(p,s) holds no infinity
	{Name: "c_dec_wider", Source: "numeric(12,2)", Target: "decimal(14,4)", Want: "({c})::numeric(14,4)::text", Read: myText,
		Values: []string{"'9999999999.99'", "'-9999999999.99'", "'0.01'", "'1.5'"}},
	{Name: "c_real", Source: "real", Target: "float", Want: "({c})::float8", Read: "{c}", Compare: CompareFloat,
		Values: []string{"'1.2345678'", "'3.4028235e38'", "'-3.4028235e38'", "'1.17549435e-38'", "'1.4e-45'", "'-1.4e-45'",
			"'0'", "'16777217'", "'0.1'"},
		Refused: []string{"'NaN'", "'Infinity'", "'-Infinity'", "'-0'"}},
	{Name: "c_double", Source: "double precision", Target: "double", Want: "{c}", Read: "{c}", Compare: CompareFloat,
		Values: []string{"'0.30000000000000004'", "'1.7976931348623157e308'", "'-1.7976931348623157e308'", "'5e-324'",
			"'2.2250738585072014e-308'", "'1e-300'", "'123456.789'", "'0'"},
		Refused: []string{"'NaN'", "'Infinity'", "'-Infinity'", "'-0'"}},
	{Name: "c_double_text", Source: "double precision", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "'0.1'", "'5e-324'", "'1.7976931348623157e308'"}},
	{Name: "c_ints", Source: "integer[]", Target: "longtext", Want: pgText, Read: myText,
		// Lower bounds other than 1 (which PostgreSQL's trigger source
		// once dropped): in one dimension of several, below zero.
		Values: []string{"'{1,NULL,3}'", "'{{1,2},{3,4}}'", "'[0:1]={7,8}'", "'{}'", "'{{{1}},{{2}}}'",
			"'[1:1][0:1]={{5,NULL}}'", "'[-3:-2]={-1,2147483647}'"}},
	{Name: "c_texts", Source: "text[]", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{`'{"a\"b","c,d",NULL,"NULL",""," x ","back\\slash"}'`, `'{{"a","b"},{"c","d"}}'`, `'{"ünï ✓","{}"}'`,
			`'[0:2]={"a\"b",NULL,"{x}"}'`}},
	{Name: "c_inets", Source: "inet[]", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'{::1,10.0.0.1/8,192.168.1.5/32}'"}},
	{Name: "c_floats", Source: "double precision[]", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{"'{-0,NaN,Infinity,1e-300,0.1}'", "'[5:6]={-0,5e-324}'"}},
	{Name: "c_json", Source: "json", Target: "json", Want: pgText, Read: myText,
		// No "\u0000": the trigger reader's json_populate_record stops on it
		// (loudly: "unsupported Unicode escape sequence").
		Values: []string{`'{"a":1,"a":2}'`, `'"\u00e9\ud83d\ude00\n"'`, `'{ "spaced" :  [1 , 2.50, 1e400] }'`,
			"'" + nested(31) + "'", `'[]'`, `'null'`}},
	{Name: "c_jsonb", Source: "jsonb", Target: "json", Want: pgText, Read: myText,
		Values: []string{`'{"b":1,"a":[1,2.50,"x"]}'`, `'{"a":1,"a":2}'`, `'"\u00e9"'`, `'1e400'`, "'" + nested(31) + "'", `'-0'`}},
	{Name: "c_date", Source: "date", Target: "date", Want: pgText, Read: myText,
		Values:  []string{"'2024-02-29'", "'0001-01-01'", "'1000-01-01'", "'9999-12-31'", "'1970-01-01'"},
		Refused: []string{"'infinity'", "'-infinity'", "'4713-01-01 BC'", "'10000-01-01'"}},
	{Name: "c_ts", Source: "timestamp(6)", Target: "datetime(6)",
		Want: "to_char({c}, 'YYYY-MM-DD HH24:MI:SS.US')", Read: "DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')",
		Values:  []string{"'2024-01-02 03:04:05.123456'", "'0001-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "'1970-01-01 00:00:00'"},
		Refused: []string{"'infinity'", "'-infinity'", "'0044-03-15 12:00:00 BC'", "'10000-01-01 00:00:00'"}},
	{Name: "c_tstz", Source: "timestamp(6) with time zone", Target: "datetime(6)",
		Want: "to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')", Read: "DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')",
		Values:  []string{"'2024-06-30 23:59:59.999999+00'", "'2001-09-09 03:46:40+02'", "'0001-01-01 00:00:00+00'", "'9999-12-31 23:59:59.999999+00'"},
		Refused: []string{"'infinity'", "'9999-12-31 23:00:00-05'"}},
	{Name: "c_tstz_ts", Source: "timestamp(6) with time zone", Target: "timestamp(6) NULL DEFAULT NULL",
		Want: "to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')", Read: "DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')",
		Values:  []string{"'1970-01-01 00:00:01+00'", "'2038-01-19 03:14:07.999999+00'", "'2024-02-29 12:00:00+00'"},
		Refused: []string{"'1970-01-01 00:00:00+00'", "'2038-01-19 03:14:08+00'", "'1969-12-31 23:59:59+00'"}},
	{Name: "c_time", Source: "time(6)", Target: "time(6)", Want: "to_char({c}, 'HH24:MI:SS.US')", Read: myText,
		Values: []string{"'00:00:00'", "'23:59:59.999999'", "'24:00:00'", "'12:34:56.5'"}},
	{Name: "c_bool", Source: "boolean", Target: "tinyint(1)", Want: "({c})::int::text", Read: myText,
		Values: []string{"true", "false"}},
	{Name: "c_i2", Source: "smallint", Target: "smallint", Want: pgText, Read: myText, Values: []string{"-32768", "32767", "0"}},
	{Name: "c_i8", Source: "bigint", Target: "bigint", Want: pgText, Read: myText,
		Values: []string{"-9223372036854775808", "9223372036854775807", "0"}},
	{Name: "c_vc", Source: "varchar(20)", Target: "varchar(20)", Want: pgText, Read: myText,
		Values: []string{"'ünïcödé ✓ 中文'", "''", "'trailing  '", "'😀🎉𝄞'", `'quote '' back\slash'`}},
	{Name: "c_char", Source: "char(6)", Target: "char(6)", Want: "({c})::text", Read: myText,
		Values: []string{"'ab'", "'abcdef'", "''", "' a'"}},
	{Name: "c_text", Source: "text", Target: "longtext", Want: pgText, Read: myText,
		Values: []string{`'quote '' and \ backslash'`, "''", "'中文 😀'", "repeat('x', 70000)", "E'tab\\there\\nnew line'"}},
	{Name: "c_bytea", Source: "bytea", Target: "longblob", Want: "{c}", Read: myBytes,
		Values: []string{`'\x00ff10'`, `'\x'`, `'\x00'`, "decode(repeat('ff00', 40000), 'hex')"}},
	{Name: "c_uuid", Source: "uuid", Target: "uuid", Want: pgText, Read: myText, Values: uuidCorpus},
	{Name: "c_uuid_bin", Source: "uuid", Target: "binary(16)", Want: "uuid_send({c})", Read: myBytes, Values: uuidCorpus},
	{Name: "c_uuid_char", Source: "uuid", Target: "char(36)", Want: pgText, Read: myText, Values: uuidCorpus},
	{Name: "c_enum", Source: "corpus_mood", Target: "enum('sad','ok','happy','Ünï ''q''')", Want: pgText, Read: myText,
		Values: []string{"'sad'", "'happy'", "'Ünï ''q'''"}},
}

var uuidCorpus = []string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'",
	"'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'A0EEBC99-9C0B-1EF8-0B6D-6BB9BD380A11'", "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'",
	"'017f22e2-79b0-7cc3-98c4-dc0c0c07398f'"}

var myToPGCorpus = []CorpusPair{
	{Name: "c_ti", Source: "tinyint", Target: "smallint", Want: myText, Read: "({c})::text", Values: []string{"-128", "127", "0"}},
	{Name: "c_mi", Source: "mediumint", Target: "integer", Want: myText, Read: "({c})::text", Values: []string{"-8388608", "8388607"}},
	{Name: "c_bi", Source: "bigint", Target: "bigint", Want: myText, Read: "({c})::text",
		Values: []string{"-9223372036854775808", "9223372036854775807", "0"}},
	{Name: "c_ui", Source: "int unsigned", Target: "bigint", Want: myText, Read: "({c})::text", Values: []string{"4294967295", "0"}},
	{Name: "c_ub", Source: "bigint unsigned", Target: "numeric(20,0)", Want: myText, Read: "({c})::text",
		Values: []string{"18446744073709551615", "0", "9223372036854775808"}},
	{Name: "c_bool", Source: "tinyint(1)", Target: "boolean", Want: "CASE {c} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END", Read: "({c})::text",
		Values: []string{"1", "0"}, Refused: []string{"2", "-1", "127"}},
	{Name: "c_dec", Source: "decimal(65,30)", Target: "numeric(65,30)", Want: myText, Read: "({c})::text",
		Values: []string{"'" + nines(35) + "." + nines(30) + "'", "'-" + nines(35) + "." + nines(30) + "'",
			"'0.000000000000000000000000000001'", "'-0.5'", "0"}},
	{Name: "c_float", Source: "float", Target: "real", Want: "{c}", Read: "({c})::float8", Compare: CompareFloat,
		Values: []string{"1.2345678", "3.40282e38", "-3.40282e38", "1.17549e-38", "1.4e-45", "16777217", "0.1", "0"}},
	{Name: "c_double", Source: "double", Target: "double precision", Want: "{c}", Read: "{c}", Compare: CompareFloat,
		Values: []string{"0.30000000000000004", "1.7976931348623157e308", "-1.7976931348623157e308", "5e-324", "2.2250738585072014e-308", "0"}},
	{Name: "c_vc", Source: "varchar(20)", Target: "varchar(20)", Want: myText, Read: "({c})::text",
		Values: []string{"'ünïcödé ✓ 中文'", "''", "'trailing  '", "'😀🎉𝄞'", `'quote '' back\\slash'`}},
	{Name: "c_char", Source: "char(6)", Target: "char(6)", Want: myText, Read: "({c})::text", Values: []string{"'ab'", "'abcdef'", "''"}},
	{Name: "c_text", Source: "mediumtext", Target: "text", Want: myText, Read: "({c})::text",
		Values: []string{"'中文 😀'", "''", "REPEAT('y', 70000)", "'tab\\there\\nnew line'"}},
	{Name: "c_bin", Source: "binary(4)", Target: "bytea", Want: myBytes, Read: "{c}", Values: []string{"'ab'", "X'00000000'", "X'FFFFFFFF'"}},
	{Name: "c_blob", Source: "blob", Target: "bytea", Want: myBytes, Read: "{c}", Values: []string{"X'00FF10'", "''", "X'00'"}},
	{Name: "c_date", Source: "date", Target: "date", Want: "DATE_FORMAT({c}, '%Y-%m-%d')", Read: "to_char({c}, 'YYYY-MM-DD')",
		Values:  []string{"'2024-02-29'", "'1000-01-01'", "'9999-12-31'", "'0001-01-01'"},
		Refused: []string{"'0000-00-00'", "'2024-00-10'", "'2024-02-00'"}},
	{Name: "c_dt", Source: "datetime(6)", Target: "timestamp(6)",
		Want: "DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')", Read: "to_char({c}, 'YYYY-MM-DD HH24:MI:SS.US')",
		Values:  []string{"'2024-01-02 03:04:05.123456'", "'1000-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "'0001-01-01 00:00:00'"},
		Refused: []string{"'0000-00-00 00:00:00'"}},
	{Name: "c_ts", Source: "timestamp(6) NULL DEFAULT NULL", Target: "timestamp(6) with time zone",
		Want: "DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')", Read: "to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')",
		Values: []string{"'1970-01-01 00:00:01'", "'2038-01-19 03:14:07.999999'", "'2024-02-29 12:00:00.5'"}},
	{Name: "c_time", Source: "time(6)", Target: "interval",
		// Microseconds: MySQL prints a TIME with all its fraction digits,
		// PostgreSQL an interval without trailing zeros.
		Want: "CAST(ROUND(TIME_TO_SEC({c}) * 1000000) AS SIGNED)", Read: "(extract(epoch from {c}) * 1000000)::bigint", Compare: CompareText,
		Values: []string{"'838:59:59'", "'-838:59:59'", "'-00:00:00.000001'", "'100:00:00.5'", "'00:00:00'", "'838:59:59.999999'"}},
	{Name: "c_tod", Source: "time(6)", Target: "time(6)", Want: myText, Read: "to_char({c}, 'HH24:MI:SS.US')",
		Values: []string{"'00:00:00'", "'23:59:59.999999'", "'24:00:00'"}, Refused: []string{"'24:00:00.000001'", "'838:59:59'", "'-00:00:01'"}},
	{Name: "c_year", Source: "year", Target: "smallint", Want: "CAST({c} + 0 AS CHAR)", Read: "({c})::text",
		Values: []string{"1901", "2155", "0", "2024"}},
	{Name: "c_bit1", Source: "bit(1)", Target: "bit(1)", Want: "LPAD(BIN({c} + 0), 1, '0')", Read: "({c})::text", Values: []string{"b'0'", "b'1'"}},
	{Name: "c_bit5", Source: "bit(5)", Target: "bit(5)", Want: "LPAD(BIN({c} + 0), 5, '0')", Read: "({c})::text",
		Values: []string{"b'10101'", "b'00000'", "b'11111'", "b'00001'"}},
	{Name: "c_bit64", Source: "bit(64)", Target: "bit(64)", Want: "LPAD(BIN({c} + 0), 64, '0')", Read: "({c})::text",
		Values: []string{"b'" + strings.Repeat("1", 64) + "'", "b'1" + strings.Repeat("0", 63) + "'", "b'0'"}},
	{Name: "c_enum", Source: "enum('small','large','Ünï ''q''')", Target: "varchar(20)", Want: myText, Read: "({c})::text",
		Values: []string{"'small'", "'large'", "'Ünï ''q'''"}},
	{Name: "c_set", Source: "set('x','y','z')", Target: "text", Want: myText, Read: "({c})::text",
		Values: []string{"''", "'x,y'", "'x,y,z'", "'z'"}},
	{Name: "c_json", Source: "json", Target: "json", Want: myText, Read: "({c})::text",
		Values: []string{`'{"a":1,"a":2}'`, `'"\\u00e9\\ud83d\\ude00"'`, `'{ "spaced" :  [1 , 2.50, 1e400] }'`, "'" + nested(31) + "'"}},
	{Name: "c_jsonb", Source: "json", Target: "jsonb", Want: myText, Read: "({c})::text", Compare: CompareJSON,
		Values:  []string{`'{"b":1,"a":[1,2.50,1e2]}'`, `'"\\u00e9\\ud83d\\ude00"'`, `'12345678901234567890.123'`, "'" + nested(31) + "'", `'{}'`},
		Refused: []string{`'{"a":1,"a":2}'`, `'"\\u0000"'`, `'{"k":{"x":1,"x":1}}'`}},
}

func nines(n int) string { return strings.Repeat("9", n) }

// nested is a JSON document n levels deep: arrays around an object.
// MariaDB's JSON_VALID, the check of its JSON columns, refuses documents
// 32 levels deep or more.
func nested(n int) string {
	return strings.Repeat("[", n-1) + `{"d":1}` + strings.Repeat("]", n-1)
}

// String names the pair for messages.
func (c CorpusPair) String() string { return fmt.Sprintf("%s (%s → %s)", c.Name, c.Source, c.Target) }

// CorpusTable is the workload's table of corpus columns (Config.Corpus).
const CorpusTable = "wl_corpus"

// Literal is an SQL literal of the source's engine, which a statement
// holds as it is (a corpus value).
type Literal string

// corpusTable is a table with a bigint key and a column per corpus pair of
// source → target, taking the pair's values.
func corpusTable(source, target Engine) *Table {
	t := &Table{Name: CorpusTable, Columns: []Column{{Name: "id", Type: Int64, NotNull: true}}, Key: []int{0}}
	for _, p := range Corpus(source, target) {
		t.Columns = append(t.Columns, Column{Name: p.Name, Type: CorpusType, Corpus: &p})
	}
	return t
}
