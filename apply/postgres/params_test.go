package postgres

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// decodeArray reads p back with pgx's own binary array decoder, which
// shares no code with encodeArray: the elements as text ("\x00" for NULL).
func decodeArray(t *testing.T, p arrayParam) []string {
	t.Helper()
	m := pgtype.NewMap()
	var out []string
	var err error
	switch p.oid {
	case pgtype.TextArrayOID:
		var vs []*string
		err = m.Scan(p.oid, pgtype.BinaryFormatCode, p.data, &vs)
		for _, v := range vs {
			if v == nil {
				out = append(out, null)
			} else {
				out = append(out, *v)
			}
		}
	default:
		var vs []*int64
		err = m.Scan(p.oid, pgtype.BinaryFormatCode, p.data, &vs)
		for _, v := range vs {
			if v == nil {
				out = append(out, null)
			} else {
				out = append(out, strconv.FormatInt(*v, 10))
			}
		}
	}
	if err != nil {
		t.Fatalf("decode array of type %d: %v", p.oid, err)
	}
	return out
}

func TestColumnParams(t *testing.T) {
	cols := []sqlColumn{pgcat("a", "int2"), pgcat("b", "int4"), pgcat("c", "int8"), pgcat("d", "numeric")}
	cases := []struct {
		name  string
		vals  [][]string // per row, per column
		kinds []paramKind
		want  [][]string // per column, the decoded elements
	}{
		{
			name:  "integers fit",
			vals:  [][]string{{"-32768", "-2147483648", "-9223372036854775808", "1.50"}, {"32767", "2147483647", "9223372036854775807", null}},
			kinds: []paramKind{int2Param, int4Param, int8Param, textParam},
			want:  [][]string{{"-32768", "32767"}, {"-2147483648", "2147483647"}, {"-9223372036854775808", "9223372036854775807"}, {"1.50", null}},
		},
		{
			name:  "NULLs and signs",
			vals:  [][]string{{null, "+7", "-0", "x"}, {"007", null, "12", `{"q\"`}},
			kinds: []paramKind{int2Param, int4Param, int8Param, textParam},
			want:  [][]string{{null, "7"}, {"7", null}, {"0", "12"}, {"x", `{"q\"`}},
		},
		{
			// Each column with one value that is not an integer of its
			// width goes as text, all its values as they were.
			name:  "out of range or not decimal",
			vals:  [][]string{{"32768", " 1", "1e3", "1"}, {"1", "2", "3", "2"}},
			kinds: []paramKind{textParam, textParam, textParam, textParam},
			want:  [][]string{{"32768", "1"}, {" 1", "2"}, {"1e3", "3"}, {"1", "2"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rows []sluice.Row
			for _, r := range c.vals {
				rows = append(rows, row(r...))
			}
			args, kinds := columnParams(nil, rows, nil, cols)
			if !slices.Equal(kinds, c.kinds) {
				t.Fatalf("kinds %v, want %v", kinds, c.kinds)
			}
			for i, a := range args {
				p := *a.(*arrayParam)
				if want, _ := kinds[i].oids(); p.oid != want {
					t.Errorf("column %d: array type %d, want %d", i, p.oid, want)
				}
				if got := decodeArray(t, p); !slices.Equal(got, c.want[i]) {
					t.Errorf("column %d: elements %q, want %q", i, got, c.want[i])
				}
			}
		})
	}
}

// FuzzColumnParams checks that whatever the text, an integer column's
// values arrive as the number the server's input function would read, or
// as the very text, and a text column's as the very text.
func FuzzColumnParams(f *testing.F) {
	f.Add("1", "-9223372036854775808", "a")
	f.Add(" 1", "+0", `{"x"}`)
	f.Add("99999999999999999999", "", "\xff")
	f.Fuzz(func(t *testing.T, a, b, s string) {
		cols := []sqlColumn{pgcat("a", "int8"), pgcat("s", "text")}
		rows := []sluice.Row{row(a, s), row(b, s)}
		args, kinds := columnParams(nil, rows, nil, cols)
		ints := decodeArray(t, *args[0].(*arrayParam))
		for i, v := range []string{a, b} {
			if v == null {
				if ints[i] != null {
					t.Errorf("NULL went as %q", ints[i])
				}
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case kinds[0] == int8Param && (err != nil || ints[i] != strconv.FormatInt(n, 10)):
				t.Errorf("%q went as the integer %s", v, ints[i])
			case kinds[0] == textParam && ints[i] != v:
				t.Errorf("%q went as the text %q", v, ints[i])
			}
		}
		if (kinds[0] == textParam) == (isInt(a) && isInt(b)) {
			t.Errorf("values %q, %q went as %v", a, b, kinds[0])
		}
		if got := decodeArray(t, *args[1].(*arrayParam)); kinds[1] != textParam || (s != null && (got[0] != s || got[1] != s)) {
			t.Errorf("text %q went as %v %q", s, kinds[1], got)
		}
	})
}

func isInt(s string) bool {
	if s == null {
		return true
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// TestIntegerColumnsAsText applies integer values that the binary form
// cannot carry: a value the server's input function reads (blanks around
// it) goes as text and lands; a value out of the column's range fails
// loudly, as it did when every value went as text.
func TestIntegerColumnsAsText(t *testing.T) {
	modes(t, func(t *testing.T, mode Mode) {
		url, conn := testDB(t, "CREATE TABLE ints (id bigint PRIMARY KEY, s smallint, i integer)")
		ints := &sluice.Table{Name: sluice.TableName{Name: "ints"}, Key: []int{0},
			Columns: []sluice.Column{{Name: "id", Type: "bigint"}, {Name: "s", Type: "smallint"}, {Name: "i", Type: "integer"}}}
		tg := openTarget(t, url, mode)
		ctx := context.Background()
		changes := []sluice.Change{ins(ints, "1", "2", "3"), ins(ints, " 4 ", "+5", null), ins(ints, "6", null, " -7")}
		if err := tg.Apply(ctx, apply.Compact(changes, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		if err := tg.Apply(ctx, apply.Compact([]sluice.Change{del(ints, " 1")}, nil), sluice.Checkpoint{}); err != nil {
			t.Fatal(err)
		}
		want := []string{"(4,5,)", "(6,,-7)"}
		if got := dump(t, conn, "ints"); !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
		err := tg.Apply(ctx, apply.Compact([]sluice.Change{ins(ints, "8", "40000", "1")}, nil), sluice.Checkpoint{})
		wantErr(t, err, "out of range", "smallint")
	})
}
