package schema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// translateGenerated translates a generated column's expression from the
// source engine's SQL to the target's, for the small part of SQL whose
// values both engines compute alike: integer and decimal columns and
// literals under unary minus, +, - and *, integer casts, abs, and
// char_length of a text column. Anything else is refused with the reason
// (division, whose result type differs; floats; unsigned integers, whose
// arithmetic MySQL does unsigned; functions whose meaning differs, such as
// length, which counts bytes on MySQL and characters on PostgreSQL):
// a target that computed a different value than the source stored would
// be a silent difference, so such a column is created plain and filled
// with the source's values instead.
//
// Integer arithmetic is done in 64 bits on MySQL and in the operands'
// width on PostgreSQL: a PostgreSQL target gets a bigint cast wherever
// neither operand is already bigint, so that it does not fail on a value
// MySQL computed. The reverse needs no cast: a value that a PostgreSQL
// source computed without overflow is the same in 64 bits.
func translateGenerated(from, to Engine, expr string, t *Table) (string, error) {
	toks, err := lexExpr(from, expr)
	if err != nil {
		return "", err
	}
	p := &exprParser{from: from, toks: toks, table: t}
	n, err := p.expr()
	if err != nil {
		return "", err
	}
	if p.pos < len(p.toks) {
		return "", fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	return n.print(to, true), nil
}

// exprKind is the class of value an expression node has.
type exprKind uint8

const (
	kindInt  exprKind = iota + 1 // a signed integer
	kindDec                      // an exact decimal
	kindText                     // a character string
)

type tokKind uint8

const (
	tokIdent  tokKind = iota + 1 // a bare word
	tokQuoted                    // a quoted identifier
	tokNumber
	tokOp // + - * ( ) , ::
)

type exprToken struct {
	kind tokKind
	text string // a quoted identifier's name without its quotes
}

// lexExpr splits an expression as engine e prints it into tokens. String
// literals, comments and every operator outside + - * ( ) , :: are refused
// here already.
func lexExpr(e Engine, s string) ([]exprToken, error) {
	var out []exprToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '`' && e == MySQL, c == '"' && e == Postgres:
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, errors.New("an unterminated quoted identifier")
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			if b.Len() == 0 {
				return nil, errors.New("an empty quoted identifier")
			}
			out = append(out, exprToken{tokQuoted, b.String()})
			i = j + 1
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j]) || s[j] == '$') {
				j++
			}
			out = append(out, exprToken{tokIdent, s[i:j]})
			i = j
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j, dot := i, false
			for j < len(s) && (isDigit(s[j]) || s[j] == '.' && !dot) {
				dot = dot || s[j] == '.'
				j++
			}
			if j < len(s) && (isIdentStart(s[j]) || s[j] == '.') {
				return nil, fmt.Errorf("the number %q", s[i:j+1])
			}
			out = append(out, exprToken{tokNumber, s[i:j]})
			i = j
		case c == ':' && i+1 < len(s) && s[i+1] == ':' && e == Postgres:
			out = append(out, exprToken{tokOp, "::"})
			i += 2
		case strings.IndexByte("+-*(),", c) >= 0:
			if c == '-' && i+1 < len(s) && s[i+1] == '-' {
				return nil, errors.New("a comment")
			}
			out = append(out, exprToken{tokOp, string(c)})
			i++
		case c == '\'' || c == '"' || c == '`':
			return nil, errors.New("a string literal")
		default:
			return nil, fmt.Errorf("the operator %q", string(c))
		}
	}
	return out, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// exprNode is a parsed expression.
type exprNode interface {
	kind() exprKind
	// big reports whether a PostgreSQL target computes the node as a
	// bigint (or wider) already.
	big() bool
	print(to Engine, top bool) string
}

type numNode struct {
	text string
	dec  bool
	wide bool // an integer that does not fit PostgreSQL's integer
}

func (n numNode) kind() exprKind {
	if n.dec {
		return kindDec
	}
	return kindInt
}
func (n numNode) big() bool                 { return n.dec || n.wide }
func (n numNode) print(Engine, bool) string { return n.text }

type colNode struct {
	name string
	k    exprKind
	wide bool // bigint
}

func (n colNode) kind() exprKind                 { return n.k }
func (n colNode) big() bool                      { return n.k == kindDec || n.wide }
func (n colNode) print(to Engine, _ bool) string { return quoteIdent(to, n.name) }

type negNode struct{ x exprNode }

func (n negNode) kind() exprKind { return n.x.kind() }
func (n negNode) big() bool      { return true } // printed so on PostgreSQL: see print
func (n negNode) print(to Engine, _ bool) string {
	if to == Postgres && n.x.kind() == kindInt && !n.x.big() {
		// The negation of an integer's least value overflows it.
		return "-(" + n.x.print(to, true) + ")::bigint"
	}
	return "-" + wrap(n.x.print(to, false), n.x)
}

type binNode struct {
	op   string
	l, r exprNode
}

func (n binNode) kind() exprKind {
	if n.l.kind() == kindDec || n.r.kind() == kindDec {
		return kindDec
	}
	return kindInt
}
func (n binNode) big() bool { return true } // printed so on PostgreSQL: see print
func (n binNode) print(to Engine, top bool) string {
	l := wrap(n.l.print(to, false), n.l)
	if to == Postgres && n.kind() == kindInt && !n.l.big() && !n.r.big() {
		l = "(" + n.l.print(to, true) + ")::bigint"
	}
	s := l + " " + n.op + " " + wrap(n.r.print(to, false), n.r)
	if top {
		return s
	}
	return "(" + s + ")"
}

// wrap parenthesizes a unary minus's operand or a binary operator's when
// it is itself a unary minus, so that "- -1" never reads as a comment.
func wrap(s string, n exprNode) string {
	if _, ok := n.(negNode); ok {
		return "(" + s + ")"
	}
	return s
}

// decNode is an exact conversion of an integer to a decimal, which MySQL
// makes implicitly where PostgreSQL shows it.
type decNode struct{ x exprNode }

func (n decNode) kind() exprKind                   { return kindDec }
func (n decNode) big() bool                        { return true }
func (n decNode) print(to Engine, top bool) string { return n.x.print(to, top) }

type castNode struct{ x exprNode }

func (n castNode) kind() exprKind { return kindInt }
func (n castNode) big() bool      { return true }
func (n castNode) print(to Engine, _ bool) string {
	if to == Postgres {
		return "(" + n.x.print(to, true) + ")::bigint"
	}
	return "CAST(" + n.x.print(to, true) + " AS SIGNED)"
}

type callNode struct {
	fn  string // lower case: abs, char_length
	arg exprNode
}

func (n callNode) kind() exprKind {
	if n.fn == "char_length" {
		return kindInt
	}
	return n.arg.kind()
}
func (n callNode) big() bool { return n.fn == "abs" }
func (n callNode) print(to Engine, _ bool) string {
	if to == Postgres && n.fn == "abs" && n.arg.kind() == kindInt && !n.arg.big() {
		// abs of an integer's least value overflows it.
		return "abs((" + n.arg.print(to, true) + ")::bigint)"
	}
	return n.fn + "(" + n.arg.print(to, true) + ")"
}

// exprParser is a recursive-descent parser of the translatable subset:
//
//	expr  := term { ("+" | "-") term }
//	term  := unary { "*" unary }
//	unary := "-" unary | post
//	post  := prim { "::" type }            (PostgreSQL)
//	prim  := number | column | "(" expr ")" | fn "(" expr ")" | CAST "(" expr AS type ")"
type exprParser struct {
	from  Engine
	toks  []exprToken
	pos   int
	table *Table
	depth int
}

// maxExprDepth bounds the nesting the parser follows, so that a
// pathological expression cannot exhaust the stack.
const maxExprDepth = 200

func (p *exprParser) peek() (exprToken, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return exprToken{}, false
}

func (p *exprParser) isOp(s string) bool {
	t, ok := p.peek()
	return ok && t.kind == tokOp && t.text == s
}

func (p *exprParser) isWord(s string) bool {
	t, ok := p.peek()
	return ok && t.kind == tokIdent && strings.EqualFold(t.text, s)
}

func (p *exprParser) want(s string) error {
	if !p.isOp(s) && !p.isWord(s) {
		if t, ok := p.peek(); ok {
			return fmt.Errorf("expected %s, found %q", s, t.text)
		}
		return fmt.Errorf("expected %s at the end", s)
	}
	p.pos++
	return nil
}

func (p *exprParser) expr() (exprNode, error) {
	if p.depth++; p.depth > maxExprDepth {
		return nil, errors.New("nesting too deep")
	}
	defer func() { p.depth-- }()
	l, err := p.term()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.toks[p.pos].text
		p.pos++
		r, err := p.term()
		if err != nil {
			return nil, err
		}
		if l, err = arith(op, l, r); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (p *exprParser) term() (exprNode, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") {
		p.pos++
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		if l, err = arith("*", l, r); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func arith(op string, l, r exprNode) (exprNode, error) {
	if l.kind() == kindText || r.kind() == kindText {
		return nil, fmt.Errorf("%s over a string, which the engines convert differently", op)
	}
	return binNode{op: op, l: l, r: r}, nil
}

func (p *exprParser) unary() (exprNode, error) {
	if p.isOp("-") {
		if p.depth++; p.depth > maxExprDepth {
			return nil, errors.New("nesting too deep")
		}
		defer func() { p.depth-- }()
		p.pos++
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		if x.kind() == kindText {
			return nil, errors.New("a minus over a string")
		}
		return negNode{x}, nil
	}
	x, err := p.prim()
	if err != nil {
		return nil, err
	}
	for p.from == Postgres && p.isOp("::") {
		p.pos++
		if x, err = p.castTo(x); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// castTo parses the type of a cast of x: an integer type only, of an
// integer (a decimal's rounding and a string's parsing differ).
func (p *exprParser) castTo(x exprNode) (exprNode, error) {
	t, ok := p.peek()
	if !ok || t.kind != tokIdent {
		return nil, errors.New("a cast without a type")
	}
	p.pos++
	typ := strings.ToLower(t.text)
	if p.from == Postgres && (typ == "text" || typ == "varchar" || typ == "character" && p.isWord("varying")) {
		// pg_get_expr shows the implicit cast of a varchar to text that a
		// text function's argument gets: it changes no value.
		if typ == "character" {
			p.pos++
		}
		if x.kind() != kindText {
			return nil, fmt.Errorf("a cast of a non-string to %s", t.text)
		}
		return x, nil
	}
	if p.from == Postgres && typ == "numeric" && !p.isOp("(") {
		// pg_get_expr shows the implicit cast of an integer operand of a
		// numeric one; MySQL mixes them into a decimal alike, exactly.
		if x.kind() == kindText {
			return nil, fmt.Errorf("a cast of a string to %s", t.text)
		}
		return decNode{x}, nil
	}
	switch {
	case p.from == Postgres && (typ == "bigint" || typ == "int8" || typ == "integer" || typ == "int" || typ == "int4" || typ == "smallint" || typ == "int2"):
	case p.from == MySQL && typ == "signed":
		if p.isWord("integer") || p.isWord("int") {
			p.pos++
		}
	default:
		return nil, fmt.Errorf("a cast to %s", t.text)
	}
	if x.kind() != kindInt {
		return nil, fmt.Errorf("a cast of a non-integer to %s, which the engines round or parse differently", t.text)
	}
	return castNode{x}, nil
}

func (p *exprParser) prim() (exprNode, error) {
	t, ok := p.peek()
	if !ok {
		return nil, errors.New("an incomplete expression")
	}
	switch {
	case t.kind == tokNumber:
		p.pos++
		if strings.Contains(t.text, ".") {
			return numNode{text: t.text, dec: true}, nil
		}
		v, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the integer %s, beyond 64 bits", t.text)
		}
		return numNode{text: t.text, wide: v > 1<<31-1}, nil
	case t.kind == tokOp && t.text == "(":
		p.pos++
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		return x, p.want(")")
	case t.kind == tokIdent && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tokOp && p.toks[p.pos+1].text == "(":
		return p.call(t.text)
	case t.kind == tokIdent || t.kind == tokQuoted:
		p.pos++
		return p.column(t)
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

func (p *exprParser) call(name string) (exprNode, error) {
	p.pos += 2 // the name and "("
	fn := strings.ToLower(name)
	if fn == "cast" {
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.want("AS"); err != nil {
			return nil, err
		}
		if x, err = p.castTo(x); err != nil {
			return nil, err
		}
		return x, p.want(")")
	}
	switch fn {
	case "abs", "char_length", "character_length":
	default:
		return nil, fmt.Errorf("the function %s, not among those sluice translates (abs, char_length)", name)
	}
	x, err := p.expr()
	if err != nil {
		return nil, err
	}
	if err := p.want(")"); err != nil {
		return nil, err
	}
	if fn == "abs" {
		if x.kind() == kindText {
			return nil, errors.New("abs of a string")
		}
		return callNode{fn: fn, arg: x}, nil
	}
	if _, ok := x.(colNode); !ok || x.kind() != kindText {
		return nil, fmt.Errorf("%s of something other than a text column", name)
	}
	return callNode{fn: "char_length", arg: x}, nil
}

// column resolves a column reference against the table: PostgreSQL folds
// a bare name to lower case, MySQL compares names without case.
func (p *exprParser) column(t exprToken) (exprNode, error) {
	name := t.text
	var c *Column
	switch {
	case p.from == Postgres && t.kind == tokIdent:
		c = p.table.Column(strings.ToLower(name))
	case p.from == Postgres:
		c = p.table.Column(name)
	default:
		for i := range p.table.Columns {
			if strings.EqualFold(p.table.Columns[i].Name, name) {
				c = &p.table.Columns[i]
				break
			}
		}
	}
	if c == nil {
		return nil, fmt.Errorf("%s, which is not a column of the table", name)
	}
	if c.Generated != "" {
		return nil, fmt.Errorf("the generated column %s", c.Name)
	}
	k, wide, ok := columnKind(p.from, c)
	if !ok {
		return nil, fmt.Errorf("column %s of type %s, whose arithmetic the engines may compute differently", c.Name, c.Type)
	}
	return colNode{name: c.Name, k: k, wide: wide}, nil
}

// columnKind classifies a source column's type for translation: signed
// integers (wide: bigint), exact decimals and character strings; others
// (floats, unsigned integers, MySQL's tinyint(1), which PostgreSQL gets as
// a boolean, binary strings, enums, user types) are not translated.
func columnKind(e Engine, c *Column) (k exprKind, wide, ok bool) {
	if c.UserType != "" || len(c.Labels) > 0 || c.JSON {
		return 0, false, false
	}
	typ := strings.ToLower(strings.TrimSpace(c.Type))
	base := typ
	if i := strings.IndexAny(base, "( "); i >= 0 {
		base = base[:i]
	}
	if e == MySQL {
		if strings.Contains(typ, "unsigned") || strings.HasPrefix(typ, "tinyint(1)") {
			return 0, false, false
		}
		switch base {
		case "tinyint", "smallint", "mediumint", "int", "integer":
			return kindInt, false, true
		case "bigint":
			return kindInt, true, true
		case "decimal", "numeric":
			return kindDec, false, true
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
			return kindText, false, true
		}
		return 0, false, false
	}
	switch {
	case typ == "smallint" || typ == "integer":
		return kindInt, false, true
	case typ == "bigint":
		return kindInt, true, true
	case base == "numeric":
		return kindDec, false, true
	case typ == "text" || strings.HasPrefix(typ, "character varying") || strings.HasPrefix(typ, "character(") || typ == "character":
		return kindText, false, true
	}
	return 0, false, false
}
