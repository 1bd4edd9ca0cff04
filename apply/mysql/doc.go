// Package mysql is the MySQL-family apply target: MySQL 8, MariaDB and
// Vitess (PlanetScale). Tested against MariaDB 10.11; it uses only SQL that
// MySQL 8, MariaDB 10.11 and vtgate all accept.
//
// # Round trips
//
// In the default, pipelined mode a batch is turned into a handful of
// multi-row statements per table — DELETE … WHERE pk IN (…) for the rows
// that end absent, INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE with the
// full row image for the rows that end present, and a multi-row UPDATE in
// place for those whose image lacks values the source did not send (see
// buildUpdates) — followed by the checkpoint upsert. Where the server
// accepts multi-statement packets
// (CLIENT_MULTI_STATEMENTS, detected at Open by trying, or configured),
// START TRANSACTION, the statements, the checkpoint and COMMIT go as one
// COM_QUERY: one round trip per batch, whatever its size. Statements are
// split to stay under max_allowed_packet (read from the server); a batch
// larger than one packet becomes several packets of the same transaction,
// never several transactions. Without multi-statements each statement is
// its own round trip: 3 + the number of statements, independent of the
// number of rows. REPLACE is never used: it deletes and re-inserts, firing
// delete triggers and ON DELETE actions of foreign keys.
//
// Values are written as SQL literals built here, not as parameters: strings
// quoted for a session pinned to NO_BACKSLASH_ESCAPES (the only escape is a
// doubled quote; the mode is checked on every new connection), binary
// columns (BINARY, VARBINARY, BLOBs, BIT) as hex literals, numbers bare so
// that comparisons with integer keys are exact.
//
// # Session
//
// Every connection runs with time_zone '+00:00', sql_mode
// STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,NO_ENGINE_SUBSTITUTION,
// NO_AUTO_VALUE_ON_ZERO (strict: a value that does not fit is an error, never
// a truncation; zero dates are accepted as the source had them; an explicit
// 0 in an AUTO_INCREMENT column stays 0), and utf8mb4.
//
// # Foreign keys and triggers on the target
//
// Every session runs with foreign_key_checks = 0 (a session variable: no
// privilege needed), so the target's foreign keys neither check sluice's
// writes nor run their ON DELETE/ON UPDATE actions. A compacted batch
// applies its tables one after another, a child before its parent or a
// key change as a delete and an insert, which checks or actions would
// turn into errors or into deletes of rows the batch does not touch; and
// the actions are carried out otherwise: a PostgreSQL source's log holds
// the rows its actions changed, and for a MySQL source, whose log does
// not, the batch carries the statements that do what the source's InnoDB
// did (apply.Cascades), which plan writes right before the change that
// fired them (cascade.go). Triggers on the target fire for sluice's
// writes: an upsert fires the INSERT triggers, or on a duplicate key the
// UPDATE triggers; a delete fires the DELETE triggers. Tables with
// nullable unique secondary keys may see an extra UPDATE per changed row
// (see below).
//
// # Unique secondary keys
//
// INSERT … ON DUPLICATE KEY UPDATE reacts to a duplicate on any unique
// index, and MySQL checks unique indexes row by row, so two changes of one
// batch that share a unique value (row A gives email x up, row B takes it;
// or A and B swap values) would fail or, worse, update the wrong row. A
// compacted batch no longer holds the old values, so sluice cannot order
// such rows; instead, for a table with unique secondary indexes whose
// columns are all nullable, it first sets those columns to NULL in the
// batch's rows whose unique values change (one multi-row UPDATE in the same
// transaction and packet; NULLs never collide), then upserts the final
// images. Every upsert into a table with unique secondary indexes also
// carries a guard: when an inserted row collides with an existing row on a
// unique index but not on the primary key, the statement fails (naming the
// table) instead of updating the other row. A collision on a unique index
// with a NOT NULL column cannot be released this way: such a batch fails
// with that error, naming the table, rather than applying a wrong state.
package mysql
