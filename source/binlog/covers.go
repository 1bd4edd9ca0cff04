package binlog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice"
)

// Covers reports whether the change whose Change.Pos is c comes at or
// before position p in the source's commit order, so that a target holding
// everything up to p holds that change. p may be any position this reader
// writes: a change's Pos, a progress marker's or a transaction boundary.
//
// done reports that no change read after c (in a read that passed c) is
// covered by p either. Binlog positions increase in read order, so done is
// !covered.
//
// The answer is exact or an error, never a guess: positions of different
// kinds or modes, of binlog histories that do not fit together, an
// anonymous (GTID-less) transaction a GTID set cannot place, and two rows
// of one transaction where one token counts changes (written by an earlier
// version) and the other names binlog events, are errors.
//
// MariaDB GTID positions keep one GTID per replication domain, and a
// transaction is ordered by its sequence number within its domain: the
// reader stops on a binlog whose sequence numbers go back within a domain
// (see state.commit), so this order is the binlog's.
func Covers(p, c sluice.Position) (covered, done bool, err error) {
	covered, err = covers(p, c)
	if err != nil {
		return false, false, fmt.Errorf("binlog: compare change position %s with position %s: %w", c, p, err)
	}
	return covered, !covered, nil
}

func covers(p, c sluice.Position) (bool, error) {
	if p.Kind != Kind || c.Kind != Kind {
		return false, fmt.Errorf("not both %q positions", Kind)
	}
	pp, err := parseToken(p.Token)
	if err != nil {
		return false, err
	}
	cp, err := parseToken(c.Token)
	if err != nil {
		return false, err
	}
	if pp.mode != cp.mode {
		return false, fmt.Errorf("one is a %s position, the other a %s one", pp.mode, cp.mode)
	}
	// The change is either a row inside its transaction, or (a TRUNCATE,
	// a progress marker) a boundary: the end of the transaction before it.
	if !cp.inTxn() {
		// A boundary change is covered once p is at or past it.
		le, ge, err := cmpBase(cp, pp)
		if err != nil {
			return false, err
		}
		switch {
		case le:
			return true, nil
		case ge:
			return false, nil // p is before the boundary (p == c is le)
		}
		return false, errIncomparable
	}
	// c is a row of transaction T_c, the first one after c's base.
	if sameTxn, err := sameTransaction(pp, cp); err != nil {
		return false, err
	} else if sameTxn {
		if !pp.inTxn() {
			return false, nil // p is the boundary before T_c
		}
		return cmpInTxn(pp, cp)
	}
	in, err := txnInBase(cp, pp)
	if err != nil {
		return false, err
	}
	le, ge, err := cmpBase(cp, pp)
	if err != nil {
		return false, err
	}
	if in {
		if !le {
			return false, errIncomparable
		}
		return true, nil
	}
	// T_c is neither finished at p nor p's own transaction: it comes
	// after p, whose base must then be at or before c's.
	if !ge {
		return false, errIncomparable
	}
	return false, nil
}

var errIncomparable = fmt.Errorf("the positions are not from one binlog history (neither is before the other)")

// sameTransaction reports whether p's base is c's: then p is the boundary
// before c's transaction or a row inside it.
func sameTransaction(p, c *position) (bool, error) {
	if p.base() != c.base() {
		// GTID sets print canonically, file positions are one
		// spelling: different text is a different point.
		return false, nil
	}
	if p.txn != "" && c.txn != "" && p.txn != c.txn {
		return false, fmt.Errorf("both are after %s but name different transactions (%s, %s)", c.base(), c.txn, p.txn)
	}
	return true, nil
}

// cmpInTxn compares two rows of one transaction: covered when c's row is
// at or before p's.
func cmpInTxn(p, c *position) (bool, error) {
	switch {
	case p.at != nil && c.at != nil:
		return c.at.cmp(*p.at) <= 0, nil
	case p.at == nil && c.at == nil:
		return c.oldK <= p.oldK, nil
	}
	return false, fmt.Errorf("inside transaction %s one position counts changes of the streamed tables (written by an earlier sluice) and the other names binlog events: they cannot be compared exactly", orAnon(c.txn))
}

func orAnon(txn string) string {
	if txn == "" {
		return "(anonymous)"
	}
	return txn
}

// txnInBase reports whether c's transaction had finished at p's base.
func txnInBase(c, p *position) (bool, error) {
	switch c.mode {
	case modeFile:
		// c's transaction is the first after c's base; a boundary
		// after c's base is at or after its end.
		cmp, err := cmpFilePos(c, p)
		if err != nil {
			return false, err
		}
		return cmp < 0, nil
	case modeMariaDB:
		g, err := mysql.ParseMariadbGTID(c.txn)
		if err != nil || c.txn == "" {
			return false, fmt.Errorf("transaction %q is not a MariaDB GTID", c.txn)
		}
		have, ok := p.gset.(*mysql.MariadbGTIDSet).Sets[g.DomainID]
		if !ok {
			return false, nil
		}
		if have.SequenceNumber == g.SequenceNumber && have.ServerID != g.ServerID {
			return false, fmt.Errorf("GTID %s and %s share domain and sequence number", g, have)
		}
		return have.SequenceNumber >= g.SequenceNumber, nil
	case modeMySQL:
		if c.txn == "" {
			return false, fmt.Errorf("the change's transaction has no GTID (anonymous): a GTID set cannot place it")
		}
		one, err := mysqlGTID(c.txn)
		if err != nil {
			return false, err
		}
		return p.gset.Contain(one), nil
	}
	return false, fmt.Errorf("unknown mode %s", c.mode)
}

// mysqlGTID parses uuid[:tag]:gno as a one-transaction set.
func mysqlGTID(txn string) (mysql.GTIDSet, error) {
	i := strings.LastIndexByte(txn, ':')
	if i < 0 {
		return nil, fmt.Errorf("transaction %q is not a MySQL GTID", txn)
	}
	if _, err := uuid.Parse(txn[:min(i, 36)]); err != nil {
		return nil, fmt.Errorf("transaction %q is not a MySQL GTID", txn)
	}
	gno, err := strconv.ParseInt(txn[i+1:], 10, 64)
	if err != nil || gno <= 0 {
		return nil, fmt.Errorf("transaction %q is not a MySQL GTID", txn)
	}
	return mysql.ParseMysqlGTIDSet(txn)
}

// cmpBase compares two bases as points of one history: le when a's is at
// or before b's, ge when at or after (both when equal, neither when they
// cannot be ordered).
func cmpBase(a, b *position) (le, ge bool, err error) {
	switch a.mode {
	case modeFile:
		c, err := cmpFilePos(a, b)
		if err != nil {
			return false, false, err
		}
		return c <= 0, c >= 0, nil
	case modeMariaDB:
		as, bs := a.gset.(*mysql.MariadbGTIDSet), b.gset.(*mysql.MariadbGTIDSet)
		return mariaLE(as, bs), mariaLE(bs, as), nil
	case modeMySQL:
		return b.gset.Contain(a.gset), a.gset.Contain(b.gset), nil
	}
	return false, false, fmt.Errorf("unknown mode %s", a.mode)
}

// mariaLE reports whether GTID position a is at or before b: in every
// domain of a, b is at a's sequence number or later.
func mariaLE(a, b *mysql.MariadbGTIDSet) bool {
	for d, ga := range a.Sets {
		gb, ok := b.Sets[d]
		if !ok || gb.SequenceNumber < ga.SequenceNumber {
			return false
		}
		if gb.SequenceNumber == ga.SequenceNumber && gb.ServerID != ga.ServerID {
			return false
		}
	}
	return true
}

// cmpFilePos orders two file:offset bases.
func cmpFilePos(a, b *position) (int, error) {
	if a.file == b.file {
		return cmpU(uint64(a.off), uint64(b.off)), nil
	}
	c, err := cmpBinlogNames(a.file, b.file)
	if err != nil {
		return 0, err
	}
	return c, nil
}

// cmpBinlogNames orders binlog file names of one server: <basename>.<n>,
// n counting up (and growing a digit past 999999).
func cmpBinlogNames(a, b string) (int, error) {
	ab, an, aok := splitBinlogName(a)
	bb, bn, bok := splitBinlogName(b)
	if !aok || !bok || ab != bb {
		return 0, fmt.Errorf("binlog files %s and %s are not of one series <name>.<number>", a, b)
	}
	return cmpU(an, bn), nil
}

func splitBinlogName(s string) (string, uint64, bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 || i == len(s)-1 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return s[:i], n, true
}
