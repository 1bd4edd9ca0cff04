// Package mytrigger reads row changes from MySQL and MariaDB through
// triggers and a changelog table, for sources where reading the binary log
// (REPLICATION SLAVE/CLIENT) is not allowed or the binary log is off.
//
// Install creates sluice_changelog in the connection's database and three
// AFTER triggers per table (sluice_<table>_ai, _au, _ad). MySQL has no
// generic row-to-JSON, so each trigger body lists the table's columns: it
// appends JSON_OBJECT of every column of the new row (insert, update) and of
// the old primary key (update, delete). How each column is captured is
// chosen per type so that the reader reproduces exactly the text the
// server's text protocol sends for it (see capture). Because the body names
// the columns, a trigger goes stale when columns change: Open compares each
// trigger with the one it would create now and refuses a stale one (or
// recreates it when Config.Install is set). Dropping or renaming a captured
// column makes the trigger fail the application's writes until `sluice
// source install` has been run: change schemas as "ALTER, then install" in
// quick succession, or uninstall first.
//
// # Reading order: the fence
//
// The changelog id is an AUTO_INCREMENT. InnoDB hands out auto-increment
// values in increasing order over time (in every innodb_autoinc_lock_mode),
// but a transaction's rows become visible when it commits, so id 10 can
// appear after id 11. Reading "id > last" would skip 10. The reader
// therefore never moves past an id that may still appear:
//
//  1. It reads rows with id > last in id order (a plain autocommit SELECT,
//     i.e. a fresh read view) and returns them while they are contiguous
//     (id = last+1), or the missing ids before them are known to be empty
//     (id-1 <= safe).
//  2. At the first gap g (a row with a higher id is visible) it records the
//     highest visible id H and the set S of InnoDB transactions running now
//     (information_schema.innodb_trx), then waits. A gap is either a row of
//     a transaction still running, a rolled-back row, or an id InnoDB
//     skipped.
//  3. Once no transaction of S is running, safe = H: every id <= H that
//     will ever commit is visible to any read started from now on. Reading
//     goes on at step 1.
//
// Why 3 holds: an id g <= H was allocated before H (ids grow with time),
// and H's transaction committed before the read of step 2 saw it, so the
// transaction T that took g started before that read. S is taken after the
// read, so T is in S unless it had already ended. Either way T has ended
// when S is empty; a read that starts after that sees g if T committed it,
// and g will never appear if T rolled back (or the id was never used). So
// no id is ever skipped, and the wait for a gap is bounded by the
// transactions that were running when the gap was seen (later
// transactions do not extend it).
//
// innodb_trx is a cache the server refreshes at most every 0.1 s, so a list
// could predate the read. To prove a list is fresh, the reader takes it
// inside a transaction of its own started (START TRANSACTION WITH
// CONSISTENT SNAPSHOT) after the read, and uses the list only if that
// transaction is in it; otherwise it asks again. Transactions that wrote
// nothing (trx_id 0 in MariaDB) are left out: the one that took g had
// written g. Reading innodb_trx needs the PROCESS privilege.
//
// Per-row order follows: two transactions modifying the same row are
// serialised by the row lock, so the second one's changelog row, written
// after the first one committed, has the higher id, and is returned after
// the first one's, which step 1 never passes. Changes of one transaction
// keep their statement order. Changes of different rows may come in id
// order rather than commit order, which the applier does not need.
//
// A position is the last id passed. A reader started without one reads the
// whole changelog: the target must hold the source rows as of the install.
// When polls pass changelog rows of other tables only, Read hands out an
// OpProgress change so that a quiet stream's position keeps up.
//
// # Several streams, pruning and lost positions
//
// Several streams may read one changelog, each with its own tables: each
// registers as a consumer (sluice_consumer, see consumer.go) when its
// reader opens, Ack records the stream's acknowledged id there, and the
// prune deletes only the ids every registered consumer has acknowledged.
// Unregister removes a consumer that is gone. A reader opening at a
// position whose changes were pruned (sluice_pruned records the highest id
// ever pruned) or whose changelog was truncated fails with ErrPositionLost
// instead of reading on from what is left.
//
// # TRUNCATE
//
// TRUNCATE fires no trigger. It gives the table a new InnoDB table id
// (MariaDB 10.11: the id changes on TRUNCATE, TRUNCATE PARTITION and every
// rebuild, not on DML or an instant ALTER; CREATE_TIME survives a
// TRUNCATE), so the reader records each table's id when the stream
// registers and checks it every second: a changed id stops the stream with
// ErrTableRewritten naming the table, which must be re-synced on the
// target. A rebuild that changed nothing (OPTIMIZE TABLE) stops it too:
// the reader cannot tell the two apart.
//
// Limits: schema changes are not captured (restart sluice after one so it
// describes the tables again); a row image longer than max_allowed_packet
// makes JSON_OBJECT return NULL and the reader fail on that row; the
// changelog's auto-increment counter must survive restarts (MySQL 8.0+,
// MariaDB 10.2.4+), else a pruned-empty changelog would reuse ids; rows
// deleted from the changelog by hand (not TRUNCATE) are not noticed;
// tested on MariaDB 10.11 only.
package mytrigger
