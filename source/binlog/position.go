package binlog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Position tokens (Position.Kind is "binlog"):
//
//	<base>                      a transaction boundary
//	<base>|<txn>|@<ev>:<row>    inside a transaction, after one row
//
// base says where to (re)start the binlog dump so that the first
// transaction the server sends is the one the position is inside (or the
// next one):
//
//	mariadb:<gtid_binlog_pos>   e.g. mariadb:0-1-42 or mariadb:0-1-42,1-7-9
//	mysql:<executed gtid set>   e.g. mysql:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57
//	file:<binlog file>:<offset> e.g. file:mysql-bin.000003:1234
//
// It is the state after the last transaction that ended before the current
// one (every transaction counts, also those that touched no replicated
// table). txn names the current transaction (its GTID, "0-1-43" or
// "uuid:58"; empty when it has none). @<ev>:<row> names the row the
// position is after by where it is in the binlog, whatever tables are
// streamed: ev is the rows event's end offset in its binlog file (the
// header's log_pos; inside a MySQL compressed transaction payload,
// <payload end>+<n>, n counting the payload's events from 1) and row the
// row's index in that event, from 0. A reader resumed from the token
// starts the dump at base, checks that the first transaction is txn and
// has an event at ev, skips every row up to and including that one and
// continues with the next, of whichever tables it streams. So every
// Change.Pos resumes exactly after that change, also with another table
// list, and the position of a transaction's last change resumes at the
// next transaction.
//
// Tokens written before sluice named rows by event end in <base>|<txn>|<k>:
// k counted the changes of the streamed tables in the transaction, so they
// resume exactly only with the table list that wrote them (and Covers
// compares two of them only with each other).
type position struct {
	mode string // modeMariaDB, modeMySQL, modeFile
	gset mysql.GTIDSet
	file string
	off  uint32
	txn  string

	// In a transaction: at (after row ev.row of event ev), or, in a token
	// of an earlier version, k (after the k-th change of the streamed
	// tables).
	at   *rowID
	oldK int

	baseStr string // cache of base(); cleared when the base moves
}

const (
	modeMariaDB = "mariadb"
	modeMySQL   = "mysql"
	modeFile    = "file"
)

// evID names an event of a transaction by where it ends in the binlog;
// sub numbers the events inside a compressed transaction payload (from 1;
// 0 outside one), which all share the payload's end.
type evID struct {
	pos uint32
	sub uint32
}

func (a evID) cmp(b evID) int {
	switch {
	case a.pos != b.pos:
		return cmpU(uint64(a.pos), uint64(b.pos))
	default:
		return cmpU(uint64(a.sub), uint64(b.sub))
	}
}

// rowID names one row of a rows event.
type rowID struct {
	ev  evID
	row int
}

func (a rowID) cmp(b rowID) int {
	if c := a.ev.cmp(b.ev); c != 0 {
		return c
	}
	return cmpU(uint64(a.row), uint64(b.row))
}

func (a rowID) String() string {
	s := "@" + strconv.FormatUint(uint64(a.ev.pos), 10)
	if a.ev.sub > 0 {
		s += "+" + strconv.FormatUint(uint64(a.ev.sub), 10)
	}
	return s + ":" + strconv.Itoa(a.row)
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// inTxn reports whether the position is inside a transaction rather than
// at a boundary.
func (p *position) inTxn() bool { return p.at != nil || p.oldK > 0 }

func (p *position) base() string {
	if p.baseStr == "" {
		p.baseStr = p.formatBase()
	}
	return p.baseStr
}

func (p *position) formatBase() string {
	switch p.mode {
	case modeFile:
		return modeFile + ":" + p.file + ":" + strconv.FormatUint(uint64(p.off), 10)
	default:
		s := ""
		if p.gset != nil {
			s = p.gset.String()
		}
		return p.mode + ":" + s
	}
}

func (p *position) token() string {
	switch {
	case p.at != nil:
		return p.base() + "|" + p.txn + "|" + p.at.String()
	case p.oldK > 0 || p.txn != "":
		return p.base() + "|" + p.txn + "|" + strconv.Itoa(p.oldK)
	}
	return p.base()
}

func parseToken(tok string) (*position, error) {
	bad := func(why string) error {
		return fmt.Errorf("binlog position %q: %s (want mariadb:<gtid_pos>, mysql:<gtid set> or file:<name>:<offset>, optionally followed by |<txn>|@<event end>:<row>)", tok, why)
	}
	parts := strings.Split(tok, "|")
	if len(parts) != 1 && len(parts) != 3 {
		return nil, bad("wrong number of | separated parts")
	}
	p := &position{}
	if len(parts) == 3 {
		p.txn = parts[1]
		if at, ok := strings.CutPrefix(parts[2], "@"); ok {
			r, err := parseRowID(at)
			if err != nil {
				return nil, bad(err.Error())
			}
			p.at = &r
		} else {
			k, err := strconv.Atoi(parts[2])
			if err != nil || k < 0 {
				return nil, bad("bad change count")
			}
			p.oldK = k
		}
	}
	mode, rest, ok := strings.Cut(parts[0], ":")
	if !ok {
		return nil, bad("no mode")
	}
	p.mode = mode
	var err error
	switch mode {
	case modeMariaDB:
		p.gset, err = mysql.ParseMariadbGTIDSet(rest)
	case modeMySQL:
		p.gset, err = mysql.ParseMysqlGTIDSet(rest)
	case modeFile:
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			return nil, bad("want file:<name>:<offset>")
		}
		off, perr := strconv.ParseUint(rest[i+1:], 10, 32)
		if perr != nil {
			return nil, bad("bad offset")
		}
		p.file, p.off = rest[:i], uint32(off)
	default:
		return nil, bad("unknown mode " + mode)
	}
	if err != nil {
		return nil, bad(err.Error())
	}
	return p, nil
}

// parseRowID reads <pos>[+<sub>]:<row>.
func parseRowID(s string) (rowID, error) {
	evS, rowS, ok := strings.Cut(s, ":")
	if !ok {
		return rowID{}, fmt.Errorf("row %q: want @<event end>:<row>", s)
	}
	posS, subS, hasSub := strings.Cut(evS, "+")
	pos, err := strconv.ParseUint(posS, 10, 32)
	if err != nil {
		return rowID{}, fmt.Errorf("row %q: bad event end", s)
	}
	var sub uint64
	if hasSub {
		if sub, err = strconv.ParseUint(subS, 10, 32); err != nil || sub == 0 {
			return rowID{}, fmt.Errorf("row %q: bad payload event number", s)
		}
	}
	row, err := strconv.Atoi(rowS)
	if err != nil || row < 0 {
		return rowID{}, fmt.Errorf("row %q: bad row index", s)
	}
	return rowID{ev: evID{pos: uint32(pos), sub: uint32(sub)}, row: row}, nil
}
