package pglogical

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice"
)

// Kind is the Position.Kind of positions written by this reader.
const Kind = "pglogical"

// position is where the reader stands in the slot's stream of committed
// transactions, which the server sends in commit LSN order.
//
// A boundary (at == 0, k == 0) means every transaction whose commit record
// starts before lsn is applied: lsn is the end LSN of the last transaction
// applied (the next transaction's commit record starts at or after it), or
// the slot position the reader started from. Its token is "<lsn>/0", e.g.
// "0/1A2B3C8/0".
//
// Inside a transaction, lsn is the start of the transaction's commit record
// and (at, i) names the last change applied of it: the change whose WAL
// record starts at at, the i-th (from 0) of the changes a record gives (a
// multi-row insert gives several, all of one table). Everything of the
// transaction up to and including that change is applied. The name depends
// only on the WAL, not on which tables are streamed, so a restart with
// another table list resumes exactly. Its token is "<lsn>@<at>.<i>", e.g.
// "0/1A2B3C8@0/1A2A000.0".
//
// Earlier versions of sluice named a change inside a transaction by its
// ordinal k among the streamed tables' changes ("<lsn>/<k>", k > 0). Such a
// token is still a valid resume position, read with the table list that
// wrote it.
type position struct {
	lsn pglogrepl.LSN
	k   int64 // ordinal of an old token; 0 otherwise
	at  pglogrepl.LSN
	i   int64
}

// inTx reports whether p is inside a transaction.
func (p position) inTx() bool { return p.k > 0 || p.at > 0 }

// token is built byte by byte rather than with LSN.String (fmt.Sprintf):
// every change carries one, and formatting them was a visible part of the
// reader's CPU.
func (p position) token() string {
	buf := make([]byte, 0, 48)
	buf = appendLSN(buf, p.lsn)
	if p.at > 0 {
		buf = append(buf, '@')
		buf = appendLSN(buf, p.at)
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, p.i, 10)
	} else {
		buf = append(buf, '/')
		buf = strconv.AppendInt(buf, p.k, 10)
	}
	return string(buf)
}

// appendLSN appends lsn as LSN.String writes it: two halves in upper-case
// hex, "%X/%X".
func appendLSN(buf []byte, lsn pglogrepl.LSN) []byte {
	buf = appendUpperHex(buf, uint32(lsn>>32))
	buf = append(buf, '/')
	return appendUpperHex(buf, uint32(lsn))
}

func appendUpperHex(buf []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var tmp [8]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = digits[v&0xF]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(buf, tmp[i:]...)
}

func (p position) sluice() sluice.Position {
	return sluice.Position{Kind: Kind, Token: p.token()}
}

func (p position) String() string { return p.token() }

// skipTx reports whether a transaction committing at commit was applied in
// full at p.
func (p position) skipTx(commit pglogrepl.LSN) bool { return commit < p.lsn }

// skipChange reports whether, in the transaction p is inside, the change
// of the WAL record at at, the i-th of that record, is applied at p.
func (p position) skipChange(at pglogrepl.LSN, i int64) bool {
	return at < p.at || (at == p.at && i <= p.i)
}

// parsePosition reads a position written by this reader; ok is false for the
// zero position.
func parsePosition(pos sluice.Position) (p position, ok bool, err error) {
	if pos.IsZero() {
		return position{}, false, nil
	}
	if pos.Kind != Kind {
		return position{}, false, fmt.Errorf("position %s is not a %s position (kind %q)", pos, Kind, pos.Kind)
	}
	if commit, change, ok := strings.Cut(pos.Token, "@"); ok {
		lsn, err := parseLSN(commit)
		if err != nil {
			return position{}, false, fmt.Errorf("position %s: %q is not an LSN", pos, commit)
		}
		at, idx, ok := strings.Cut(change, ".")
		if !ok {
			return position{}, false, fmt.Errorf("position %s: want commit-lsn@change-lsn.index, e.g. 0/16B3748@0/16B3700.0", pos)
		}
		atLSN, err := parseLSN(at)
		if err != nil || atLSN == 0 {
			return position{}, false, fmt.Errorf("position %s: %q is not a change's LSN", pos, at)
		}
		i, err := strconv.ParseInt(idx, 10, 64)
		if err != nil || i < 0 {
			return position{}, false, fmt.Errorf("position %s: change index %q is not a non-negative integer", pos, idx)
		}
		return position{lsn: lsn, at: atLSN, i: i}, true, nil
	}
	i := strings.LastIndexByte(pos.Token, '/')
	if i < 0 {
		return position{}, false, fmt.Errorf("position %s: want lsn/0 or commit-lsn@change-lsn.index, e.g. 0/16B3748/0", pos)
	}
	lsn, err := parseLSN(pos.Token[:i])
	if err != nil {
		return position{}, false, fmt.Errorf("position %s: %q is not an LSN", pos, pos.Token[:i])
	}
	k, err := strconv.ParseInt(pos.Token[i+1:], 10, 64)
	if err != nil || k < 0 {
		return position{}, false, fmt.Errorf("position %s: change count %q is not a non-negative integer", pos, pos.Token[i+1:])
	}
	return position{lsn: lsn, k: k}, true, nil
}

// parseLSN reads an LSN's text form "hi/lo" (hex). pglogrepl.ParseLSN uses
// fmt.Sscanf, which cost a sixth of the reader's CPU when every change's
// position is parsed.
func parseLSN(s string) (pglogrepl.LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("LSN %q: want hi/lo in hex", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: %w", s, err)
	}
	return pglogrepl.LSN(h<<32 | l), nil
}
