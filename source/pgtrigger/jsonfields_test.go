package pgtrigger

import (
	"reflect"
	"testing"
)

func TestJSONFields(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]string
	}{
		{"empty", `{}`, map[string]string{}},
		{"scalars", `{"id":1,"s":"a,b}","n":null,"b":true}`,
			map[string]string{"id": "1", "s": `"a,b}"`, "n": "null", "b": "true"}},
		{"json column kept verbatim", `{"id":1,"j": {"b" : [1, 2,{"c":"}"}] , "a":1} ,"k":2}`,
			map[string]string{"id": "1", "j": ` {"b" : [1, 2,{"c":"}"}] , "a":1} `, "k": "2"}},
		{"escapes kept", `{"j":"\u00e9\"\\","x":"\/"}`,
			map[string]string{"j": `"\u00e9\"\\"`, "x": `"\/"`}},
		{"escaped member name", `{"a\"b":1,"\u00e9":2}`, map[string]string{`a"b`: "1", "é": "2"}},
		{"last member with whitespace", `{"j":[1] }`, map[string]string{"j": "[1] "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := jsonFields(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("jsonFields(%s) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestJSONFieldsErrors(t *testing.T) {
	for _, in := range []string{``, `[1]`, `{"a"}`, `{"a":1`, `{"a":"x`, `{a:1}`, `{"a":1]`} {
		if got, err := jsonFields(in); err == nil {
			t.Errorf("jsonFields(%s) = %q, want error", in, got)
		}
	}
}
