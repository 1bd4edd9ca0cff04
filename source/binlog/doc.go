// Package binlog reads row changes from the binary log of MySQL or
// MariaDB, as a replica does (go-mysql's replication.BinlogSyncer).
//
// Rows are described with each TABLE_MAP event's own metadata, which the
// server logs with binlog_row_metadata=FULL (column names, signedness,
// ENUM/SET labels, collations, primary key), never with the table's current
// definition: replaying from before an ALTER describes every row as it was
// written. Values are carried as MySQL's text-protocol form (what a plain
// SELECT returns), the same convention as source/mytrigger, with two
// exceptions where that form is not the value: FLOAT is the shortest text
// that reads back to the identical float32 (the text protocol rounds it to
// 6 digits), and character columns are converted to UTF-8 from the
// character set the table map gives (utf8mb4, utf8mb3, latin1 — MySQL's
// latin1 is Windows-1252 —, ascii; binary columns are carried as bytes).
// A column of any other character set is refused at Open, naming it and
// the fix. TIMESTAMP values are rendered in UTC.
//
// Transactions end at XID events (or a QUERY "COMMIT"/"ROLLBACK" for
// non-transactional tables, or a DDL statement, which is its own
// transaction). See position.go for the position token, which resumes
// exactly after any change, also inside a transaction and with another
// table list, and Covers for how two positions compare. While the reader
// moves through binlog that holds no change of the streamed tables it
// hands out OpProgress markers (Config.ProgressInterval).
//
// Schema changes: a column added to a replicated table is followed (the
// next table map has it; later changes carry a new *sluice.Table). A
// TRUNCATE is handed out as an OpTruncate change. A dropped or renamed
// column, a changed column type, a dropped primary key, a dropped, renamed
// or re-created table, and partition or tablespace operations that change
// rows without logging them stop the stream with an error naming the table
// and column; nothing after that statement is emitted.
//
// A session that logs partial rows (binlog_row_image NOBLOB or MINIMAL)
// or statements (binlog_format STATEMENT or MIXED), whatever the global
// settings Open checks, stops the stream at the first such event of a
// streamed table, before any change of it (SessionLogError, sessionlog.go).
//
// XA transactions that write a streamed table stop the stream (XAError):
// the binlog holds their rows at XA PREPARE, before their outcome. A start
// position whose binlog the source purged is refused at Open
// (PurgedError).
//
// Connection loss (a source restart): the reader reconnects on its own,
// every second, from its own position (not go-mysql's retry, which would
// resend a partly read transaction), and skips what it already emitted.
//
// Requirements (checked by Open, with the fix in the error): log_bin=ON,
// binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL
// (MySQL 8.0.1+, MariaDB 10.5+; there is no information_schema fallback),
// the REPLICATION SLAVE and REPLICATION CLIENT (MariaDB: BINLOG MONITOR)
// privileges, SELECT on the tables, tables that exist and have a primary
// key, and a server_id of our own.
//
// Limits: MySQL partial JSON updates (binlog_row_value_options=
// PARTIAL_JSON) are refused. TLS to the source is not configured.
package binlog
