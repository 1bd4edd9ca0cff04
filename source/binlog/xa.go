package binlog

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice"
)

// XA transactions are logged in two event groups: the rows at XA PREPARE
// (MariaDB: a GTID event flagged FL_PREPARED_XA that stands for XA START,
// the rows, a QUERY "XA END", an XA_PREPARE event; MySQL: a QUERY "XA
// START", the rows, "XA END", XA_PREPARE), and later, in a group of its
// own, the QUERY "XA COMMIT" or "XA ROLLBACK" that decides them. Emitting
// the rows at PREPARE would leave them applied after an XA ROLLBACK, and
// holding them until the decision would hold an unbounded amount of data
// for an unbounded time, so the reader stops at the first row of a
// streamed table in a prepared group. XA transactions of other tables are
// followed as ordinary transactions. MariaDB logs XA COMMIT … ONE PHASE as
// an ordinary transaction; MySQL logs it as a prepared group too, so there
// it stops the stream as well.

// mariaFlPreparedXA is MariaDB's GTID event flag FL_PREPARED_XA
// (log_event.h): the group is the PREPARE part of an XA transaction, and
// the event carries its XID. (FL_COMPLETED_XA, 128, marks the later XA
// COMMIT/ROLLBACK group, which holds no rows.)
const mariaFlPreparedXA = 64

// XAError stops the stream at an XA transaction that writes a streamed
// table, before any of its rows is handed out.
type XAError struct {
	XID    string // as the server spells it, e.g. X'747831',X'',1 ('tx1')
	GTID   string // the prepared group's GTID; empty without GTIDs
	Table  sluice.TableName
	Before string // the position before the transaction
}

func (e *XAError) Error() string {
	gtid := ""
	if e.GTID != "" {
		gtid = " (GTID " + e.GTID + ")"
	}
	return fmt.Sprintf("binlog: XA transaction %s%s writes table %s, and sluice does not follow XA transactions: "+
		"the binlog holds their rows at XA PREPARE, before XA COMMIT or XA ROLLBACK decides them, so the stream stopped before the transaction (at %s) and handed out none of its rows; "+
		"let the transaction finish on the source (XA RECOVER lists those still prepared), apply its outcome to the target, "+
		"and start the stream again from a position after it — and write %s without XA (MariaDB: XA COMMIT … ONE PHASE is an ordinary transaction)",
		e.XID, gtid, e.Table, e.Before, e.Table)
}

// TableOf names the table, for log lines (sluice.ErrTable).
func (e *XAError) TableOf() (sluice.TableName, bool) { return e.Table, true }

// xaStart reads MySQL's QUERY "XA START <xid>" (or XA BEGIN) and returns
// the XID.
func xaStart(q string) (string, bool) {
	f := strings.Fields(q)
	if len(f) < 2 || !strings.EqualFold(f[0], "XA") || !(strings.EqualFold(f[1], "START") || strings.EqualFold(f[1], "BEGIN")) {
		return "", false
	}
	xid := strings.TrimSpace(q[strings.Index(strings.ToUpper(q), strings.ToUpper(f[1]))+len(f[1]):])
	return withReadable(xid), true
}

// mariaXID decodes the XID that a MariaDB GTID event flagged as XA carries
// after its fixed part (go-mysql does not): format id (4 bytes), the
// lengths of gtrid and bqual (1 byte each), then both.
func mariaXID(raw []byte, flags byte) string {
	const unknown = "(XID not readable)"
	if len(raw) < replication.EventHeaderSize {
		return unknown
	}
	b := raw[replication.EventHeaderSize:]
	off := 8 + 4 + 1 // sequence number, domain id, flags
	if flags&replication.BINLOG_MARIADB_FL_GROUP_COMMIT_ID != 0 {
		off += 8
	}
	if len(b) < off+6 {
		return unknown
	}
	format := binary.LittleEndian.Uint32(b[off:])
	gl, bl := int(b[off+4]), int(b[off+5])
	data := b[off+6:]
	if len(data) < gl+bl {
		return unknown
	}
	xid := fmt.Sprintf("X'%s',X'%s',%d", hex.EncodeToString(data[:gl]), hex.EncodeToString(data[gl:gl+bl]), format)
	return withReadable(xid)
}

// withReadable adds the gtrid as text when it is printable, as operators
// wrote it ('tx1' after X'747831',…).
func withReadable(xid string) string {
	rest, ok := strings.CutPrefix(xid, "X'")
	if !ok {
		return xid
	}
	h, _, ok := strings.Cut(rest, "'")
	if !ok {
		return xid
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) == 0 {
		return xid
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) {
			return xid
		}
	}
	return xid + " ('" + strings.ReplaceAll(string(b), "'", "''") + "')"
}
