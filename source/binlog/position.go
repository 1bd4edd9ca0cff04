package binlog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Position tokens (Position.Kind is "binlog"):
//
//	<base>|<txn>|<k>
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
// "uuid:58"; empty when it has none) and k is how many changes of
// replicated tables that transaction has produced up to and including this
// one. A reader resumed from the token starts the dump at base, checks that
// the first transaction is txn, skips its first k changes and continues
// with change k+1. So every Change.Pos resumes exactly after that change,
// even in the middle of a transaction, and the position of a transaction's
// last change resumes at the next transaction. "<base>" alone (k = 0) is
// also accepted: it starts with the first transaction after base.
//
// The skip counts changes of the tables the reader streams, so resume a
// position with the same table list that wrote it.
type position struct {
	mode string // modeMariaDB, modeMySQL, modeFile
	gset mysql.GTIDSet
	file string
	off  uint32
	txn  string
	k    int

	baseStr string // cache of base(); cleared when the base moves
}

const (
	modeMariaDB = "mariadb"
	modeMySQL   = "mysql"
	modeFile    = "file"
)

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
	if p.k == 0 && p.txn == "" {
		return p.base()
	}
	return p.base() + "|" + p.txn + "|" + strconv.Itoa(p.k)
}

func parseToken(tok string) (*position, error) {
	bad := func(why string) error {
		return fmt.Errorf("binlog position %q: %s (want mariadb:<gtid_pos>, mysql:<gtid set> or file:<name>:<offset>, optionally followed by |<txn>|<k>)", tok, why)
	}
	parts := strings.Split(tok, "|")
	if len(parts) != 1 && len(parts) != 3 {
		return nil, bad("wrong number of | separated parts")
	}
	p := &position{}
	if len(parts) == 3 {
		p.txn = parts[1]
		k, err := strconv.Atoi(parts[2])
		if err != nil || k < 0 {
			return nil, bad("bad change count")
		}
		p.k = k
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
