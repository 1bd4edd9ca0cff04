package binlog

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice"
)

// PurgedError refuses a position the source can no longer serve: the
// binlog it needs was purged (PURGE BINARY LOGS, binlog_expire_logs_seconds,
// expire_logs_days). Starting anywhere else would silently lose the
// changes in between.
type PurgedError struct {
	Position sluice.Position
	// Needs is what the position needs: a binlog file, or the
	// transactions after a GTID.
	Needs string
	// Has says what the source still has.
	Has string
}

func (e *PurgedError) Error() string {
	return fmt.Sprintf("binlog: stream position %s needs %s, which the source no longer has (%s): "+
		"the changes since are lost to this stream; the target needs a fresh copy of the streamed tables, "+
		"and the stream a new start position (keep binlogs longer than the stream may be stopped: binlog_expire_logs_seconds)",
		e.Position, e.Needs, e.Has)
}

// checkServable makes sure the source still has every binlog the start
// position needs. The server refuses some such dumps itself, but not all:
// MariaDB starts a replication domain the position does not list from
// wherever its binlogs begin.
func (r *Reader) checkServable(ctx context.Context, p *position, from sluice.Position) error {
	logs, err := r.binaryLogs(ctx)
	if err != nil {
		return err
	}
	if len(logs) == 0 {
		return nil // the dump will say the binary log is off
	}
	oldest := logs[0]
	switch p.mode {
	case modeFile:
		for _, l := range logs {
			if l == p.file {
				return nil
			}
		}
		c, err := cmpBinlogNames(p.file, oldest)
		if err != nil {
			return nil // another server's series: the dump's error says so
		}
		newest := logs[len(logs)-1]
		if n, err := cmpBinlogNames(p.file, newest); err == nil && n > 0 {
			return nil // a file the source never wrote: the dump's error says so
		}
		has := "its oldest binlog is " + oldest
		if c > 0 {
			has = "it is missing from the source's binlogs " + oldest + " … " + newest
		}
		return &PurgedError{Position: from, Needs: "binlog " + p.file, Has: has}
	case modeMariaDB:
		var s string
		if err := r.db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", oldest).Scan(&s); err != nil {
			return fmt.Errorf("binlog: read where the source's oldest binlog %s starts (BINLOG_GTID_POS), to check that position %s is still in its binlogs: %w", oldest, from, err)
		}
		return mariaServable(p, from, oldest, s)
	case modeMySQL:
		var s string
		if err := r.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_purged").Scan(&s); err != nil {
			return fmt.Errorf("binlog: read gtid_purged, to check that position %s is still in the source's binlogs: %w", from, err)
		}
		return mysqlServable(p, from, oldest, s)
	}
	return nil
}

// mariaServable checks a MariaDB GTID position against where the oldest
// binlog starts (its Gtid_list): in every domain listed there, the
// position must be at that sequence number or later, or the transactions
// in between were in purged binlogs.
func mariaServable(p *position, from sluice.Position, oldest, oldestStart string) error {
	start, err := lastSeqPerDomain(oldestStart)
	if err != nil {
		return fmt.Errorf("binlog: BINLOG_GTID_POS of %s is %q: %w", oldest, oldestStart, err)
	}
	have := p.gset.(*mysql.MariadbGTIDSet).Sets
	domains := make([]uint32, 0, len(start))
	for d := range start {
		domains = append(domains, d)
	}
	sort.Slice(domains, func(i, j int) bool { return domains[i] < domains[j] })
	for _, d := range domains {
		g, ok := have[d]
		if ok && g.SequenceNumber >= start[d] {
			continue
		}
		after := "its first transaction"
		if ok {
			after = g.String()
		}
		return &PurgedError{Position: from,
			Needs: fmt.Sprintf("the binlogs with the transactions of replication domain %d after %s", d, after),
			Has:   fmt.Sprintf("its oldest binlog, %s, starts after %s", oldest, oldestStart)}
	}
	return nil
}

// mysqlServable checks a MySQL GTID position against gtid_purged: every
// purged transaction must be in the position's executed set.
func mysqlServable(p *position, from sluice.Position, oldest, gtidPurged string) error {
	s := strings.ReplaceAll(gtidPurged, "\n", "")
	purged, err := mysql.ParseMysqlGTIDSet(s)
	if err != nil {
		return fmt.Errorf("binlog: gtid_purged %q: %w", s, err)
	}
	if !p.gset.Contain(purged) {
		return &PurgedError{Position: from,
			Needs: "transactions that the source has purged from its binlogs (gtid_purged " + s + ") and the position has not read",
			Has:   "its oldest binlog is " + oldest}
	}
	return nil
}

// binaryLogs lists the source's binlog files, oldest first.
func (r *Reader) binaryLogs(ctx context.Context) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("binlog: SHOW BINARY LOGS, to check that the start position is still in the source's binlogs: %w", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("binlog: SHOW BINARY LOGS: %w", err)
		}
		out = append(out, asString(vals[0]))
	}
	return out, rows.Err()
}

// lastSeqPerDomain reads a MariaDB GTID list (a binlog's Gtid_list, which
// may hold several servers per domain) as the highest sequence number of
// each domain.
func lastSeqPerDomain(s string) (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	for _, g := range strings.Split(s, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		f := strings.Split(g, "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("GTID %q: want domain-server-sequence", g)
		}
		d, err1 := strconv.ParseUint(f[0], 10, 32)
		n, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("GTID %q: want domain-server-sequence", g)
		}
		if n > out[uint32(d)] {
			out[uint32(d)] = n
		}
	}
	return out, nil
}
