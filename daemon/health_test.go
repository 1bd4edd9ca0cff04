package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
)

func TestSlotWALWarning(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name      string
		h         SlotHealth
		level     string
		mentioned string
	}{
		{"under 70%", SlotHealth{Percent: 69.9, Limit: "max_slot_wal_keep_size", LimitBytes: gib}, "", ""},
		{"70%", SlotHealth{Percent: 70, Limit: "max_slot_wal_keep_size", LimitBytes: gib}, "70", "invalidates the slot"},
		{"84%", SlotHealth{Percent: 84.9, Limit: "--slot-wal-limit", LimitBytes: gib}, "70", "until the source's disk fills"},
		{"85%", SlotHealth{Percent: 85, Limit: "max_slot_wal_keep_size", LimitBytes: gib}, "85", "85%"},
		{"unreserved", SlotHealth{Percent: 10, Limit: "--slot-wal-limit", LimitBytes: gib, WALStatus: "unreserved"}, "85", "unreserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.Slot = "sluice_orders"
			level, msg := slotWALWarning(&tc.h, "db1:5432")
			if level != tc.level || !strings.Contains(msg, tc.mentioned) || (level != "" && !strings.Contains(msg, "sluice_orders")) {
				t.Fatalf("level %q, message %q; want level %q mentioning %q", level, msg, tc.level, tc.mentioned)
			}
		})
	}
}

func TestSlotIdleWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    SlotHealth
		warn bool
	}{
		{"read", SlotHealth{Active: true}, false},
		{"idle a while", SlotHealth{InactiveSeconds: 299}, false},
		{"idle too long", SlotHealth{InactiveSeconds: 301}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := slotIdleWarning(&tc.h, "db1:5432", "orders", 5*time.Minute)
			if (msg != "") != tc.warn || (tc.warn && !strings.Contains(msg, "--stream-id orders")) {
				t.Fatalf("message %q, want a warning: %v", msg, tc.warn)
			}
		})
	}
}

func TestBinlogWarning(t *testing.T) {
	pos := sluice.Position{Kind: "binlog", Token: "file:bin.000002:400"}
	const day = 86400
	for _, tc := range []struct {
		name      string
		h         BinlogHealth
		files     int
		mentioned string
	}{
		{"never expires", BinlogHealth{Needs: "bin.000002", FilesBefore: 1, Files: 5}, 0, ""},
		{"days left", BinlogHealth{Needs: "bin.000002", ExpireSeconds: 7 * day, Setting: "binlog_expire_logs_seconds", PurgeInSeconds: 6 * day}, 0, ""},
		{"expires within the warning", BinlogHealth{Needs: "bin.000002", ExpireSeconds: 7 * day, Setting: "binlog_expire_logs_seconds", PurgeInSeconds: 20 * 3600}, 0, "may be purged in about 20h0m0s"},
		{"already due", BinlogHealth{ExpireSeconds: day, Setting: "expire_logs_days", PurgeInSeconds: -5}, 0, "in about 0s"},
		{"few older binlogs", BinlogHealth{Needs: "bin.000002", FilesBefore: 1, Files: 5}, 2, "only 1 older binlogs"},
		{"enough older binlogs", BinlogHealth{Needs: "bin.000004", FilesBefore: 3, Files: 5}, 2, ""},
		{"the binlog being written", BinlogHealth{Needs: "bin.000002", FilesBefore: 1, Files: 2}, 2, ""},
		{"needed binlog unknown", BinlogHealth{FilesBefore: -1, Files: 5}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := binlogWarning(&tc.h, pos, "db2:3306", 24*time.Hour, tc.files)
			if (msg == "") != (tc.mentioned == "") || !strings.Contains(msg, tc.mentioned) {
				t.Fatalf("message %q, want one mentioning %q", msg, tc.mentioned)
			}
		})
	}
}
