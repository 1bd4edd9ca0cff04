// Package pgtrigger reads row changes from PostgreSQL through triggers and
// a changelog table, for sources where logical replication is not allowed.
//
// Install puts a changelog table and an AFTER ROW trigger on each selected
// table into a schema of sluice's own ("sluice" by default). Every insert,
// update and delete appends the row image (row_to_json) and the old primary
// key to the changelog, stamped with the writing transaction's id. The
// image writes SQL NULL and the JSON value null alike, so for the nullable
// json and jsonb columns it shows as null the trigger also records which
// one each is (the changelog's nulls column; see functions); the image
// writes every array as starting at 1, so for arrays that do not the
// trigger records their bounds (the changelog's dims column).
//
// The Reader reads the changelog in snapshot windows, as PgQ does: it takes
// pg_current_snapshot() S and reads the rows whose transaction is visible
// in S but not in the previous snapshot, i.e. the transactions that
// committed between the two. Windows follow commit order, and inside a
// window changelog id order follows each row's modification order (a
// writer holds the row lock until it commits, so whoever modifies the row
// next gets a later id). Ordering by id alone, or by id below the oldest
// running xid, skips the changes of long transactions or misorders them.
//
// A reader started without a position reads every row in the changelog:
// the target must hold the source rows as of the install, every change made
// after it is streamed. PositionAt gives the position that matches a copy
// taken in a REPEATABLE READ transaction, for an initial copy made after
// the install.
//
// A TRUNCATE is captured by a statement-level trigger and handed out in
// order as an OpTruncate change. A TRUNCATE of a single partition of a
// streamed table stops the stream with ErrPartialTruncate instead: the
// target cannot truncate part of a table.
//
// Change positions carry the writing transaction's id, so that Covers can
// tell exactly whether one position covers another read's change. When
// windows advance with no change of the streamed tables, Read hands out
// OpProgress changes so that a quiet stream's position keeps up.
//
// Several streams may read one changelog (see consumer.go): each
// registers as a consumer when its reader opens, Ack records the stream's
// position there, and prunes only the rows every consumer has
// acknowledged. A reader opening at a position whose changes were pruned,
// or after the changelog was truncated, fails with ErrPositionLost.
//
// Not captured: schema changes (restart sluice after one so it describes
// the tables again), rows deleted from the changelog by hand (not
// TRUNCATE), and a TRUNCATE of a partition attached after the install
// (reinstall after attaching one).
package pgtrigger
