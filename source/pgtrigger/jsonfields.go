package pgtrigger

import (
	"encoding/json"
	"fmt"
)

// jsonFields splits a JSON object, as row_to_json writes it, into the raw
// text of each member's value, keyed by member name.
//
// It exists for json columns. row_to_json embeds a json column's text
// verbatim, but json_populate_record (and encoding/json) do not give it back
// verbatim: a top-level JSON string is de-escaped and re-escaped ("\u00e9"
// becomes "é") and whitespace around the value is dropped. row_to_json
// writes no whitespace of its own, so everything between a member's colon
// and the comma or brace that ends it is the column's own text, byte for
// byte.
func jsonFields(s string) (map[string]string, error) {
	i := 0
	ws := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	// str scans the JSON string starting at s[i] and returns its end.
	str := func() (int, error) {
		if i >= len(s) || s[i] != '"' {
			return 0, fmt.Errorf("offset %d: want string", i)
		}
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("offset %d: unterminated string", i)
	}
	ws()
	if i >= len(s) || s[i] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	i++
	out := make(map[string]string)
	for {
		ws()
		if i < len(s) && s[i] == '}' && len(out) == 0 {
			return out, nil
		}
		end, err := str()
		if err != nil {
			return nil, err
		}
		var name string
		if err := json.Unmarshal([]byte(s[i:end]), &name); err != nil {
			return nil, fmt.Errorf("offset %d: member name: %w", i, err)
		}
		i = end
		ws()
		if i >= len(s) || s[i] != ':' {
			return nil, fmt.Errorf("offset %d: want ':'", i)
		}
		i++
		start, depth := i, 0
	value:
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				end, err := str()
				if err != nil {
					return nil, err
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth == 0 {
					break value
				}
				depth--
			case ',':
				if depth == 0 {
					break value
				}
			}
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated object")
		}
		out[name] = s[start:i]
		if s[i] == '}' {
			return out, nil
		}
		if s[i] != ',' {
			return nil, fmt.Errorf("offset %d: want ',' or '}'", i)
		}
		i++
	}
}
