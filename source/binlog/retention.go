package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sluice-cdc/sluice"
)

// Retention is how the source keeps the binlog a stream's position needs,
// for a warning before expiry purges it (the stream would then stop with a
// PurgedError and need a fresh copy).
type Retention struct {
	// ExpireSeconds is how old a binlog may get before the server purges
	// it (binlog_expire_logs_seconds, or expire_logs_days), 0 when it never
	// does; Setting names the variable that says so.
	ExpireSeconds int64
	Setting       string
	// Logs are the source's binlogs, oldest first.
	Logs []string
	// Needs is the binlog holding the first transaction after the
	// position, NeedsIndex its index in Logs; "" and -1 when the position
	// does not tell (a MySQL GTID set) or the file is gone.
	Needs      string
	NeedsIndex int
}

// ReadRetention reads how db's server keeps the binlogs, and which one pos
// (a position of this reader) needs.
func ReadRetention(ctx context.Context, db *sql.DB, pos sluice.Position) (Retention, error) {
	ret := Retention{NeedsIndex: -1}
	var err error
	if ret.ExpireSeconds, ret.Setting, err = expiry(ctx, db); err != nil {
		return Retention{}, err
	}
	r := &Reader{db: db}
	if ret.Logs, err = r.binaryLogs(ctx); err != nil {
		return Retention{}, err
	}
	if pos.IsZero() || len(ret.Logs) == 0 {
		return ret, nil
	}
	if pos.Kind != Kind {
		return Retention{}, fmt.Errorf("binlog: position %s is not a binlog position", pos)
	}
	p, err := parseToken(pos.Token)
	if err != nil {
		return Retention{}, err
	}
	switch p.mode {
	case modeFile:
		ret.Needs = p.file
	case modeMariaDB:
		// The newest binlog that starts at or before the position holds
		// the transaction after it.
		have := p.gset.(*mysql.MariadbGTIDSet).Sets
		for i := len(ret.Logs) - 1; i >= 0 && ret.Needs == ""; i-- {
			var s string
			if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", ret.Logs[i]).Scan(&s); err != nil {
				return Retention{}, fmt.Errorf("binlog: read where binlog %s starts (BINLOG_GTID_POS): %w", ret.Logs[i], err)
			}
			start, err := lastSeqPerDomain(s)
			if err != nil {
				return Retention{}, fmt.Errorf("binlog: BINLOG_GTID_POS of %s is %q: %w", ret.Logs[i], s, err)
			}
			before := true
			for d, n := range start {
				if g, ok := have[d]; !ok || g.SequenceNumber < n {
					before = false
				}
			}
			if before {
				ret.Needs = ret.Logs[i]
			}
		}
	}
	for i, l := range ret.Logs {
		if l == ret.Needs {
			ret.NeedsIndex = i
		}
	}
	return ret, nil
}

// expiry reads the server's binlog expiry: binlog_expire_logs_seconds
// where the server has it and it is set, else expire_logs_days (MySQL
// before 8.0 and MariaDB before 10.6 have only the days; MySQL 8.4 only
// the seconds).
func expiry(ctx context.Context, db *sql.DB) (int64, string, error) {
	var secs int64
	err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.binlog_expire_logs_seconds").Scan(&secs)
	if err != nil && !unknownVariable(err) {
		return 0, "", fmt.Errorf("binlog: read binlog_expire_logs_seconds: %w", err)
	}
	if err == nil && secs > 0 {
		return secs, "binlog_expire_logs_seconds", nil
	}
	var days float64
	derr := db.QueryRowContext(ctx, "SELECT @@GLOBAL.expire_logs_days").Scan(&days)
	switch {
	case derr == nil && days > 0:
		return int64(days * 86400), "expire_logs_days", nil
	case derr != nil && !unknownVariable(derr):
		return 0, "", fmt.Errorf("binlog: read expire_logs_days: %w", derr)
	}
	return 0, "binlog_expire_logs_seconds", nil
}

func unknownVariable(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1193
}
