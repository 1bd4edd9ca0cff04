// Package connstr owns sluice's connection strings: which forms are
// accepted (a PostgreSQL URL postgres:// or postgresql://, the PostgreSQL
// key=value form as libpq and pgx read it, a MySQL URL mysql:// or
// mariadb://, and a go-sql-driver DSN user:pass@tcp(host:3306)/db), which
// engine each names, where its password is, and how to print it without
// that password. Every string sluice prints that may hold a connection
// string goes through Mask; a string that cannot be parsed is redacted
// whole, because where its password ends cannot be told.
package connstr

import (
	"errors"
	"net/url"
	"strings"
)

// Form is the syntax of a connection string.
type Form int

const (
	// Unknown is a string in none of the accepted forms.
	Unknown Form = iota
	// PostgresURL is postgres://user:pass@host:5432/db?….
	PostgresURL
	// PostgresKeyValue is host=… user=… password='se cret' dbname=….
	PostgresKeyValue
	// MySQLURL is mysql://user:pass@host:3306/db (or mariadb://).
	MySQLURL
	// MySQLDSN is go-sql-driver's user:pass@tcp(host:3306)/db?….
	MySQLDSN
)

// Engine is the kind of server a Form connects to: "postgres", "mysql" or "".
func (f Form) Engine() string {
	switch f {
	case PostgresURL, PostgresKeyValue:
		return "postgres"
	case MySQLURL, MySQLDSN:
		return "mysql"
	}
	return ""
}

// Masked replaces a password in printed connection strings.
const Masked = "xxxxx"

// Redacted is what Mask prints for a string it cannot parse.
const Redacted = "<unparseable connection string redacted>"

// ErrUnparseable says a connection string is in none of the accepted
// forms; it never carries the string itself.
var ErrUnparseable = errors.New("the connection string is neither a postgres:// or mysql:// URL, a PostgreSQL key=value string (host=… dbname=…), nor a MySQL DSN user:pass@tcp(host:3306)/db")

// FormOf tells the form of s. It returns ErrUnparseable (never echoing s)
// when s is in no accepted form, and an error naming the scheme for a URL
// of another scheme.
func FormOf(s string) (Form, error) {
	if scheme, _, ok := strings.Cut(s, "://"); ok && isScheme(scheme) {
		if _, err := url.Parse(s); err != nil {
			// url.Parse's error holds the URL, and its reason part of
			// the password: say only what to do.
			why := "percent-encode the characters % @ : / ? # & and spaces in the user name and password (% as %25, @ as %40), or use the key=value form or a password file"
			if strings.Contains(err.Error(), "invalid port") {
				why = "its port is not a number; or, if the port is right, the user name or password holds a character that must be percent-encoded (% @ : / ? # & and spaces; % as %25, @ as %40; or use the key=value form or a password file)"
			}
			return Unknown, errors.New("the " + strings.ToLower(scheme) + ":// URL does not parse: " + why)
		}
		switch strings.ToLower(scheme) {
		case "postgres", "postgresql":
			return PostgresURL, nil
		case "mysql", "mariadb":
			return MySQLURL, nil
		}
		return Unknown, errors.New("unsupported scheme " + strings.ToLower(scheme) + ":// (supported: postgres://, postgresql://, mysql://, mariadb://, a PostgreSQL key=value string, a MySQL DSN)")
	}
	if _, err := parseKV(s); err == nil {
		return PostgresKeyValue, nil
	}
	if _, _, ok := dsnPassword(s); ok {
		return MySQLDSN, nil
	}
	return Unknown, ErrUnparseable
}

func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// Password returns the password s holds, if any, decoded (a URL's
// percent-encoding and a key=value string's quotes removed).
func Password(s string) (string, bool) {
	f, err := FormOf(s)
	if err != nil {
		return "", false
	}
	switch f {
	case PostgresURL, MySQLURL:
		u, err := url.Parse(s)
		if err != nil {
			return "", false
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				return p, true
			}
		}
		for k, v := range u.Query() {
			if isPasswordKey(k) && len(v) > 0 {
				return v[0], true
			}
		}
	case PostgresKeyValue:
		kvs, _ := parseKV(s)
		for _, kv := range kvs {
			if isPasswordKey(kv.key) {
				return kv.value, true
			}
		}
	case MySQLDSN:
		i, j, _ := dsnPassword(s)
		if i < j {
			return s[i:j], true
		}
	}
	return "", false
}

func isPasswordKey(k string) bool {
	return strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword")
}

// Mask returns s with every password in it replaced by Masked. A string
// in no accepted form, or a URL that does not parse, is replaced whole by
// Redacted (naming only a known scheme).
func Mask(s string) string {
	f, err := FormOf(s)
	if err != nil {
		if scheme, _, ok := strings.Cut(s, "://"); ok && isScheme(scheme) {
			if _, err := url.Parse(s); err != nil {
				return "<unparseable " + strings.ToLower(scheme) + ":// connection string redacted>"
			}
			return "<" + strings.ToLower(scheme) + ":// connection string redacted>"
		}
		return Redacted
	}
	switch f {
	case PostgresURL, MySQLURL:
		u, err := url.Parse(s)
		if err != nil {
			return "<unparseable " + strings.ToLower(schemeOf(s)) + ":// connection string redacted>"
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), Masked)
			}
		}
		if u.RawQuery != "" {
			q, err := url.ParseQuery(u.RawQuery)
			if err != nil {
				return "<unparseable " + strings.ToLower(schemeOf(s)) + ":// connection string redacted>"
			}
			changed := false
			for k := range q {
				if isPasswordKey(k) {
					q.Set(k, Masked)
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		}
		u.Fragment, u.RawFragment = "", ""
		return u.String()
	case PostgresKeyValue:
		kvs, _ := parseKV(s)
		var b strings.Builder
		last := 0
		for _, kv := range kvs {
			if isPasswordKey(kv.key) {
				b.WriteString(s[last:kv.start])
				b.WriteString(Masked)
				last = kv.end
			}
		}
		b.WriteString(s[last:])
		return b.String()
	case MySQLDSN:
		i, j, _ := dsnPassword(s)
		if i < j {
			return s[:i] + Masked + s[j:]
		}
		return s
	}
	return Redacted
}

// schemeOf is what comes before "://" in s: the scheme of a URL that
// url.Parse refused, kept in its redacted stand-in so that the reader still
// sees which engine it named.
func schemeOf(s string) string {
	scheme, _, _ := strings.Cut(s, "://")
	return scheme
}

type kv struct {
	key        string
	value      string
	start, end int // the value's bytes in the string, quotes included
}

// parseKV reads a PostgreSQL key=value connection string as libpq does:
// pairs separated by whitespace, spaces allowed around '=', a value either
// single-quoted ('se cret', with \' and \\ escapes) or running to the next
// whitespace (backslash escapes the next character).
func parseKV(s string) ([]kv, error) {
	var out []kv
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		k := i
		for i < len(s) && isKeyByte(s[i]) {
			i++
		}
		if i == k {
			return nil, ErrUnparseable
		}
		key := s[k:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) || s[i] != '=' {
			return nil, ErrUnparseable
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start := i
		var v strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					v.WriteByte(s[i+1])
					i += 2
					continue
				}
				if c == '\\' {
					return nil, ErrUnparseable
				}
				if c == '\'' {
					i++
					closed = true
					break
				}
				v.WriteByte(c)
				i++
			}
			if !closed {
				return nil, ErrUnparseable
			}
			if i < len(s) && !isSpace(s[i]) {
				return nil, ErrUnparseable
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					v.WriteByte(s[i+1])
					i += 2
					continue
				}
				v.WriteByte(s[i])
				i++
			}
		}
		out = append(out, kv{key: key, value: v.String(), start: start, end: i})
	}
	if len(out) == 0 {
		return nil, ErrUnparseable
	}
	return out, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// dsnPassword finds the password of a go-sql-driver DSN
// [user[:pass]@][net[(addr)]]/db[?params] as the driver reads it: the
// password runs from the first ':' to the last '@' before the last '/'
// (it may itself hold '@', ':' and '/'). ok is false when s has no '/'.
func dsnPassword(s string) (i, j int, ok bool) {
	slash := strings.LastIndex(s, "/")
	if slash < 0 {
		return 0, 0, false
	}
	at := strings.LastIndex(s[:slash], "@")
	if at < 0 {
		// No credentials: the part before '/' must look like net(addr).
		pre := s[:slash]
		if pre != "" && !strings.HasSuffix(pre, ")") && strings.ContainsAny(pre, " =:'\"") {
			return 0, 0, false
		}
		return 0, 0, true
	}
	colon := strings.Index(s[:at], ":")
	if colon < 0 {
		return 0, 0, true
	}
	return colon + 1, at, true
}

// Redact replaces every occurrence of each secret in text, raw and
// percent-encoded (as a URL's userinfo or query would hold it), by Masked.
// Driver errors may quote a connection string or a password: text that
// leaves the process goes through Redact with the passwords it may hold.
func Redact(text string, secrets ...string) string {
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		for _, form := range []string{sec, url.QueryEscape(sec), url.PathEscape(sec), url.UserPassword("u", sec).String()[2:]} {
			if form != "" {
				text = strings.ReplaceAll(text, form, Masked)
			}
		}
	}
	return text
}

// WithPassword returns s with its password set to pw, in any accepted form.
func WithPassword(s, pw string) (string, error) {
	f, err := FormOf(s)
	if err != nil {
		return "", err
	}
	switch f {
	case PostgresURL, MySQLURL:
		u, err := url.Parse(s)
		if err != nil {
			return "", errors.New("the connection string is not a valid URL (percent-encode special characters in the password, or give the password in a file)")
		}
		user := ""
		if u.User != nil {
			user = u.User.Username()
		}
		u.User = url.UserPassword(user, pw)
		return u.String(), nil
	case PostgresKeyValue:
		kvs, _ := parseKV(s)
		quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		for _, kv := range kvs {
			if strings.EqualFold(kv.key, "password") {
				return s[:kv.start] + quoted + s[kv.end:], nil
			}
		}
		return strings.TrimRight(s, " \t\r\n") + " password=" + quoted, nil
	case MySQLDSN:
		i, j, _ := dsnPassword(s)
		if i < j || (i > 0 && i == j) {
			return s[:i] + pw + s[j:], nil
		}
		at := strings.LastIndex(s[:strings.LastIndex(s, "/")], "@")
		if at < 0 {
			return "", errors.New("the MySQL DSN names no user: write user@tcp(host:3306)/db")
		}
		return s[:at] + ":" + pw + s[at:], nil
	}
	return "", ErrUnparseable
}
