package binlog

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
)

// A row image holds a character column's bytes in the column's character
// set, whatever the connection's. Values are carried as UTF-8 text, so
// every character set the reader accepts has a decoder here, and any other
// is refused (at Open for the tables as they are, in the table map for a
// row image written before an ALTER) rather than passed on as bytes that
// would be wrong text.

// decoder turns a column's bytes into UTF-8; nil for binary columns.
type decoder func(string) (string, error)

// charsets are the character sets the reader converts, by the name
// information_schema uses. ("utf8" is utf8mb3's name before MySQL 8.0.30
// and MariaDB 10.6.)
var charsets = map[string]decoder{
	"utf8mb4": validUTF8,
	"utf8mb3": validUTF8,
	"utf8":    validUTF8,
	"latin1":  decodeLatin1,
	"ascii":   decodeASCII,
	"binary":  nil,
}

// supportedCharsets lists the converted character sets for messages.
func supportedCharsets() string {
	names := make([]string, 0, len(charsets))
	for n := range charsets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// collation is one row of information_schema.COLLATIONS: the table map
// names a column's character set by its collation id.
type collation struct {
	name    string
	charset string
}

// columnCollation is what a string column's collation means for
// sluice.Column.Collation: empty for the binary character set, whose
// values are equal only when their bytes are.
func columnCollation(charset, name string) string {
	if charset == "binary" || name == "binary" {
		return ""
	}
	return name
}

func validUTF8(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("value is not valid UTF-8 (%s)", badBytes(s))
	}
	return s, nil
}

// MySQL's latin1 is Windows-1252, with the five bytes Windows-1252 leaves
// undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D) mapped to the C1 controls of
// the same number, as the server converts them.
var latin1Table = func() (t [256]rune) {
	for i := range t {
		r := charmap.Windows1252.DecodeByte(byte(i))
		if r == utf8.RuneError {
			r = rune(i)
		}
		t[i] = r
	}
	return t
}()

func decodeLatin1(s string) (string, error) {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		b.WriteRune(latin1Table[s[i]])
	}
	return b.String(), nil
}

// decodeASCII refuses a byte above 0x7F: the server shows it as '?', and
// passing either on would make the target differ from the source.
func decodeASCII(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return "", fmt.Errorf("value of an ascii column holds byte 0x%02X at offset %d, which is not ASCII: correct the value on the source (or convert the column to utf8mb4)", s[i], i)
		}
	}
	return s, nil
}

// badBytes locates the first invalid UTF-8 sequence for a message.
func badBytes(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return fmt.Sprintf("byte 0x%02X at offset %d", s[i], i)
		}
		i += n
	}
	return "no offset"
}
