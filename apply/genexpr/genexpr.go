// Package genexpr compares the expressions of generated columns as the
// catalogs of MySQL, MariaDB and PostgreSQL print them, so that a target
// can say when its generated column is computed differently from the
// source's. Each catalog prints an expression its own way: MariaDB
// "`price` * `qty`", MySQL 8 "(`price` * `qty`)" with character-set
// introducers before string literals, PostgreSQL "(price *
// (qty)::numeric)" with the casts its parser added. Canonical parses an
// expression with SQL's operator precedence and prints the tree with
// every operation in parentheses, identifiers unquoted and lower-cased,
// type casts and introducers dropped; two expressions are the same when
// their canonical forms are. It is a heuristic for a warning, not a proof
// of equal values: the same spelling may compute differently on two
// engines (integer division, JSON functions), which verify shows.
package genexpr

import (
	"errors"
	"slices"
	"strings"
)

// How says, for messages, how Same compares.
const How = "compared with identifiers unquoted and lower-cased, type casts, character-set introducers and redundant parentheses dropped"

// Same reports whether two generation expressions have the same canonical
// form.
func Same(a, b string) bool { return Canonical(a) == Canonical(b) }

// Canonical returns expr in the form Same compares. An expression it
// cannot parse is compared token by token (casts and introducers still
// dropped, parentheses kept).
func Canonical(expr string) string {
	toks := tokenize(expr)
	p := &parser{toks: toks}
	if n, err := p.parse(); err == nil {
		var b strings.Builder
		n.write(&b)
		return b.String()
	}
	return flat(toks)
}

// tokKind is what a token is.
type tokKind uint8

const (
	tIdent  tokKind = iota + 1 // a name or keyword, lower-cased; quoted ones unquoted
	tQuoted                    // a quoted identifier, unquoted and lower-cased
	tString                    // a string literal's value
	tNumber
	tOp    // an operator
	tPunct // ( ) , [ ] .
)

type token struct {
	kind tokKind
	text string
}

func (t token) is(kind tokKind, text string) bool { return t.kind == kind && t.text == text }

// keyword reports whether t is the unquoted word w.
func (t token) keyword(w string) bool { return t.kind == tIdent && t.text == w }

// multiOps are the operators of more than one character, longest first.
var multiOps = []string{"!~~*", "!~~", "~~*", "->>", "#>>", "<=>", "::", "->", "#>", "<>", "!=", "<=", ">=", "||", "&&", "<<", ">>", "@>", "<@", "!~", "~*", "~~"}

// opAliases are operators PostgreSQL prints for keywords: LIKE is ~~.
var opAliases = map[string]string{"~~": "like", "~~*": "ilike", "!~~": "not like", "!~~*": "not ilike", "!=": "<>"}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// tokenize splits an expression into tokens. It never fails: an
// unterminated literal or quoted name runs to the end.
func tokenize(s string) []token {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '`' || c == '"':
			v, n := quoted(s[i:], c, false)
			out = append(out, token{tQuoted, strings.ToLower(v)})
			i += n
		case c == '\'':
			v, n := quoted(s[i:], '\'', true)
			out = append(out, token{tString, v})
			i += n
		case (c == 'E' || c == 'e' || c == 'N' || c == 'n') && i+1 < len(s) && s[i+1] == '\'':
			// PostgreSQL's escape string, the national character set
			// prefix: the value is what counts.
			v, n := quoted(s[i+1:], '\'', true)
			out = append(out, token{tString, v})
			i += 1 + n
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
				j++
			}
			if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
				k := j + 1
				if k < len(s) && (s[k] == '+' || s[k] == '-') {
					k++
				}
				if k < len(s) && s[k] >= '0' && s[k] <= '9' {
					for j = k; j < len(s) && s[j] >= '0' && s[j] <= '9'; j++ {
					}
				}
			}
			out = append(out, token{tNumber, s[i:j]})
			i = j
		case isIdentByte(c):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			word := strings.ToLower(s[i:j])
			if word[0] == '_' && j < len(s) && s[j] == '\'' {
				// A character-set introducer (MySQL's _utf8mb4'…'): the
				// literal follows.
				i = j
				continue
			}
			out = append(out, token{tIdent, word})
			i = j
		case strings.ContainsRune("(),[].", rune(c)):
			out = append(out, token{tPunct, string(c)})
			i++
		default:
			op := string(c)
			for _, m := range multiOps {
				if strings.HasPrefix(s[i:], m) {
					op = m
					break
				}
			}
			i += len(op)
			if a, ok := opAliases[op]; ok {
				op = a
			}
			out = append(out, token{tOp, op})
		}
	}
	return out
}

// quoted reads a literal or name quoted by q at the start of s, a doubled
// q standing for itself (and, in a string, a backslash escaping the next
// byte, as MySQL prints them), and returns its value and length.
func quoted(s string, q byte, backslash bool) (string, int) {
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		switch {
		case backslash && c == '\\' && i+1 < len(s):
			b.WriteByte(s[i+1])
			i += 2
			continue
		case c == q && i+1 < len(s) && s[i+1] == q:
			b.WriteByte(q)
			i += 2
			continue
		case c == q:
			return b.String(), i + 1
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), i
}

// flat is the token-by-token form of an expression that does not parse.
func flat(toks []token) string {
	var parts []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.is(tOp, "::") {
			i = skipType(toks, i+1) - 1
			continue
		}
		parts = append(parts, leaf{t}.String())
	}
	return strings.Join(parts, " ")
}

// typeWords continue a type name of several words (character varying,
// timestamp with time zone, double precision).
var typeWords = map[string]bool{"varying": true, "precision": true, "with": true, "without": true, "time": true, "zone": true}

// skipType returns the index after the type name starting at toks[i]: a
// name, possibly qualified or of several words, with an optional modifier
// list and array brackets.
func skipType(toks []token, i int) int {
	if i < len(toks) && (toks[i].kind == tIdent || toks[i].kind == tQuoted) {
		i++
		for i+1 < len(toks) && toks[i].is(tPunct, ".") {
			i += 2
		}
		for i < len(toks) && toks[i].kind == tIdent && typeWords[toks[i].text] {
			i++
		}
	}
	if i < len(toks) && toks[i].is(tPunct, "(") {
		for depth := 0; i < len(toks); i++ {
			if toks[i].is(tPunct, "(") {
				depth++
			} else if toks[i].is(tPunct, ")") {
				depth--
				if depth == 0 {
					i++
					break
				}
			}
		}
	}
	for i+1 < len(toks) && toks[i].is(tPunct, "[") && toks[i+1].is(tPunct, "]") {
		i += 2
	}
	return i
}

// node is a parsed expression.
type node interface{ write(b *strings.Builder) }

type leaf struct{ t token }

func (l leaf) String() string {
	switch l.t.kind {
	case tString:
		return "'" + strings.ReplaceAll(l.t.text, "'", "''") + "'"
	case tQuoted:
		// A quoted name is the same column as the unquoted one, and is
		// printed so unless it would read as something else.
		if bare(l.t.text) {
			return l.t.text
		}
		return `"` + strings.ReplaceAll(l.t.text, `"`, `""`) + `"`
	}
	return l.t.text
}

// keywords are the words the parser gives a meaning of their own.
var keywords = map[string]bool{"not": true, "case": true, "cast": true, "convert": true, "is": true, "between": true, "collate": true,
	"when": true, "then": true, "else": true, "end": true}

// bare reports whether a name reads as itself unquoted.
func bare(name string) bool {
	if name == "" || name[0] >= '0' && name[0] <= '9' || keywords[name] || listWords[name] {
		return false
	}
	if _, ok := binary[name]; ok {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isIdentByte(name[i]) || name[i] >= 'A' && name[i] <= 'Z' {
			return false
		}
	}
	return true
}

func (l leaf) write(b *strings.Builder) { b.WriteString(l.String()) }

type call struct {
	name string
	args []node
}

func (c call) write(b *strings.Builder) {
	b.WriteString(c.name)
	b.WriteByte('(')
	for i, a := range c.args {
		switch {
		case i == 0:
		case isListWord(a) || isListWord(c.args[i-1]):
			b.WriteByte(' ')
		default:
			b.WriteByte(',')
		}
		a.write(b)
	}
	b.WriteByte(')')
}

// op is an operation: a prefix operator (left nil), a postfix one (right
// nil) or a binary one.
type op struct {
	name        string
	left, right node
}

func (o op) write(b *strings.Builder) {
	b.WriteByte('(')
	if o.left != nil {
		o.left.write(b)
		b.WriteByte(' ')
	}
	b.WriteString(o.name)
	if o.right != nil {
		b.WriteByte(' ')
		o.right.write(b)
	}
	b.WriteByte(')')
}

type subscript struct{ x, index node }

func (s subscript) write(b *strings.Builder) {
	s.x.write(b)
	b.WriteByte('[')
	s.index.write(b)
	b.WriteByte(']')
}

type between struct {
	name      string // between, not between
	x, lo, hi node
}

func (n between) write(b *strings.Builder) {
	b.WriteByte('(')
	n.x.write(b)
	b.WriteString(" " + n.name + " ")
	n.lo.write(b)
	b.WriteString(" and ")
	n.hi.write(b)
	b.WriteByte(')')
}

type caseNode struct {
	subject node // nil in a searched CASE
	words   []string
	parts   []node
}

func (c caseNode) write(b *strings.Builder) {
	b.WriteString("case")
	if c.subject != nil {
		b.WriteByte(' ')
		c.subject.write(b)
	}
	for i, w := range c.words {
		b.WriteString(" " + w + " ")
		c.parts[i].write(b)
	}
	b.WriteString(" end")
}

// Binding powers, from SQL's precedence (PostgreSQL's table; MySQL's
// agrees for the operators both have).
const (
	precOr = iota + 1
	precAnd
	precNot
	precCompare
	precOther // ||, ->, ->> and the other operators without a rank of their own
	precAdd
	precMul
	precPow
	precUnary
	precPostfix
)

var binary = map[string]int{
	"or": precOr, "xor": precOr, "and": precAnd, "&&": precAnd,
	"=": precCompare, "<>": precCompare, "!=": precCompare, "<": precCompare, ">": precCompare,
	"<=": precCompare, ">=": precCompare, "<=>": precCompare,
	"like": precCompare, "ilike": precCompare, "not like": precCompare, "not ilike": precCompare, "regexp": precCompare, "rlike": precCompare, "in": precCompare,
	"+": precAdd, "-": precAdd,
	"*": precMul, "/": precMul, "%": precMul, "div": precMul, "mod": precMul,
	"^": precPow,
}

var errSyntax = errors.New("cannot parse")

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *parser) next() token {
	t := p.peek()
	if p.pos < len(p.toks) {
		p.pos++
	}
	return t
}

func (p *parser) expect(kind tokKind, text string) error {
	if !p.next().is(kind, text) {
		return errSyntax
	}
	return nil
}

func (p *parser) parse() (node, error) {
	n, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, errSyntax
	}
	return n, nil
}

// infix returns the operator at the current token and its binding power,
// or 0; not is set for NOT LIKE, NOT IN and their kind.
func (p *parser) infix() (name string, prec int, not bool) {
	t := p.peek()
	switch t.kind {
	case tOp:
		if pr, ok := binary[t.text]; ok {
			return t.text, pr, false
		}
		if t.text == "::" {
			return t.text, precPostfix, false
		}
		return t.text, precOther, false
	case tPunct:
		if t.text == "[" {
			return t.text, precPostfix, false
		}
	case tIdent:
		switch t.text {
		case "is", "between", "collate":
			return t.text, precCompare, false
		case "not":
			if p.pos+1 < len(p.toks) {
				n := p.toks[p.pos+1]
				if n.kind == tIdent {
					switch n.text {
					case "like", "ilike", "in", "between", "regexp", "rlike":
						return n.text, precCompare, true
					}
				}
			}
			return "", 0, false
		}
		if pr, ok := binary[t.text]; ok {
			return t.text, pr, false
		}
	}
	return "", 0, false
}

func (p *parser) expr(min int) (node, error) {
	left, err := p.prefix()
	if err != nil {
		return nil, err
	}
	for {
		name, prec, not := p.infix()
		if prec == 0 || prec < min {
			return left, nil
		}
		p.next()
		if not {
			p.next()
			name = "not " + name
		}
		switch name {
		case "::":
			// A cast says how the server reads a value, not what the
			// expression computes: PostgreSQL prints the casts its
			// parser added, MySQL none.
			end := skipType(p.toks, p.pos)
			if end == p.pos {
				return nil, errSyntax
			}
			p.pos = end
			if l, ok := left.(leaf); ok && l.t.kind == tString && isNumber(l.t.text) {
				// PostgreSQL prints a negative constant as '-1'::integer.
				left = leaf{token{tNumber, l.t.text}}
			}
		case "[":
			idx, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			if err := p.expect(tPunct, "]"); err != nil {
				return nil, err
			}
			left = subscript{left, idx}
		case "collate":
			t := p.next()
			if t.kind != tIdent && t.kind != tQuoted && t.kind != tString {
				return nil, errSyntax
			}
			left = op{name: "collate", left: left, right: leaf{t}}
		case "is":
			name := "is"
			if p.peek().keyword("not") {
				name += " " + p.next().text
			}
			t := p.next()
			switch {
			case t.keyword("distinct"):
				if err := p.expect(tIdent, "from"); err != nil {
					return nil, err
				}
				right, err := p.expr(precCompare + 1)
				if err != nil {
					return nil, err
				}
				left = op{name: name + " distinct from", left: left, right: right}
			case t.kind == tIdent:
				left = op{name: name + " " + t.text, left: left}
			default:
				return nil, errSyntax
			}
		case "between", "not between":
			lo, err := p.expr(precCompare + 1)
			if err != nil {
				return nil, err
			}
			if err := p.expect(tIdent, "and"); err != nil {
				return nil, err
			}
			hi, err := p.expr(precCompare + 1)
			if err != nil {
				return nil, err
			}
			left = between{name: name, x: left, lo: lo, hi: hi}
		default:
			right, err := p.expr(prec + 1)
			if err != nil {
				return nil, err
			}
			left = op{name: name, left: left, right: right}
		}
	}
}

func (p *parser) prefix() (node, error) {
	t := p.next()
	switch t.kind {
	case tString, tNumber, tQuoted:
		return p.qualified(leaf{t})
	case tOp:
		switch t.text {
		case "-", "+", "~", "!":
			x, err := p.expr(precUnary)
			if err != nil {
				return nil, err
			}
			if n, ok := x.(leaf); ok && n.t.kind == tNumber && t.text == "-" {
				return leaf{token{tNumber, "-" + n.t.text}}, nil
			}
			return op{name: t.text, right: x}, nil
		}
	case tPunct:
		if t.text != "(" {
			return nil, errSyntax
		}
		items, err := p.list(")")
		if err != nil {
			return nil, err
		}
		if len(items) == 1 {
			// Parentheses only group: the tree keeps the grouping.
			return items[0], nil
		}
		return call{name: "", args: items}, nil
	case tIdent:
		switch t.text {
		case "not":
			x, err := p.expr(precNot)
			if err != nil {
				return nil, err
			}
			return op{name: "not", right: x}, nil
		case "case":
			return p.caseExpr()
		case "cast", "convert":
			if p.peek().is(tPunct, "(") {
				return p.cast(t.text)
			}
		}
		if p.peek().is(tPunct, "(") {
			p.next()
			args, err := p.list(")")
			if err != nil {
				return nil, err
			}
			return newCall(t.text, args), nil
		}
		return p.qualified(leaf{t})
	}
	return nil, errSyntax
}

// funcAliases are functions of two names: MariaDB prints LOWER as lcase,
// SUBSTRING as substr.
var funcAliases = map[string]string{"lcase": "lower", "ucase": "upper", "substr": "substring", "character_length": "char_length", "pow": "power"}

// newCall is a function call with its name and argument forms made
// canonical: SUBSTRING(s FROM 1 FOR 2) is substring(s, 1, 2).
func newCall(name string, args []node) call {
	if a, ok := funcAliases[name]; ok {
		name = a
	}
	if name == "substring" {
		args = slices.DeleteFunc(slices.Clone(args), func(n node) bool {
			l, ok := n.(leaf)
			return ok && (l.t.keyword("from") || l.t.keyword("for"))
		})
	}
	return call{name: name, args: args}
}

// qualified reads a qualified name's further parts (t.c).
func (p *parser) qualified(first leaf) (node, error) {
	if first.t.kind != tIdent && first.t.kind != tQuoted {
		return first, nil
	}
	name := first.String()
	for p.peek().is(tPunct, ".") {
		p.next()
		t := p.next()
		if t.kind != tIdent && t.kind != tQuoted {
			return nil, errSyntax
		}
		name += "." + leaf{t}.String()
	}
	return leaf{token{tIdent, name}}, nil
}

// listWords are the words some functions take between their arguments
// (EXTRACT(year FROM d), SUBSTRING(s FROM 1 FOR 2), POSITION(a IN b),
// GROUP_CONCAT(x SEPARATOR ',')): kept as arguments of their own.
var listWords = map[string]bool{"from": true, "for": true, "as": true, "using": true, "separator": true, "both": true, "leading": true, "trailing": true, "distinct": true}

func isListWord(n node) bool {
	l, ok := n.(leaf)
	return ok && l.t.kind == tIdent && listWords[l.t.text]
}

// list reads expressions separated by commas (and listWords) up to end.
func (p *parser) list(end string) ([]node, error) {
	var out []node
	if p.peek().is(tPunct, end) {
		p.next()
		return out, nil
	}
	for {
		if t := p.peek(); t.kind == tIdent && listWords[t.text] {
			out = append(out, leaf{p.next()})
			continue
		}
		x, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
		t := p.next()
		switch {
		case t.is(tPunct, end):
			return out, nil
		case t.is(tPunct, ","):
		case t.kind == tIdent && listWords[t.text]:
			out = append(out, leaf{t})
		default:
			return nil, errSyntax
		}
	}
}

// cast reads CAST(x AS type) or CONVERT(x, type) / CONVERT(x USING cs)
// (the opening parenthesis next) and returns x: casts are dropped, as
// PostgreSQL's :: are.
func (p *parser) cast(fn string) (node, error) {
	p.next()
	x, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	t := p.next()
	if !(t.keyword("as") || fn == "convert" && (t.is(tPunct, ",") || t.keyword("using"))) {
		return nil, errSyntax
	}
	for depth := 1; ; {
		t := p.next()
		switch {
		case t.kind == 0:
			return nil, errSyntax
		case t.is(tPunct, "("):
			depth++
		case t.is(tPunct, ")"):
			if depth--; depth == 0 {
				return x, nil
			}
		}
	}
}

// caseExpr reads CASE [x] WHEN … THEN … [ELSE …] END (CASE read).
func (p *parser) caseExpr() (node, error) {
	var c caseNode
	if !p.peek().keyword("when") {
		x, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		c.subject = x
	}
	for {
		t := p.next()
		switch {
		case t.keyword("when"), t.keyword("then"), t.keyword("else"):
			x, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			c.words = append(c.words, t.text)
			c.parts = append(c.parts, x)
		case t.keyword("end") && len(c.parts) > 0:
			return c, nil
		default:
			return nil, errSyntax
		}
	}
}

// isNumber reports whether s is a decimal number: an optional minus sign,
// digits and at most one point.
func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	digits, points := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] >= '0' && s[i] <= '9':
			digits++
		case s[i] == '.':
			points++
		default:
			return false
		}
	}
	return digits > 0 && points <= 1
}
