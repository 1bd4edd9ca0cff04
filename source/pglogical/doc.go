// Package pglogical reads row changes from PostgreSQL logical replication:
// a replication slot decoded by the built-in pgoutput plugin (protocol
// version 1, text values) for a publication of the streamed tables.
//
// Setup creates the publication and the slot; Open starts streaming from
// the slot. A goroutine owns the replication connection: it decodes the
// stream into a bounded buffer that Read drains, answers keepalives, and
// sends standby status updates on an interval and after every Ack, so the
// slot's confirmed_flush_lsn follows what the target has committed.
//
// Positions (see position) name a transaction by the LSN of its commit
// record and a change inside it by its ordinal, so a reader resumes exactly
// after any change it handed out, even in the middle of a transaction: the
// slot resends whole transactions from its confirmed_flush_lsn and the
// reader skips what the position says is applied.
//
// Values are the text that the types' output functions give under
// pgtrigger.SessionSettings (the replication session runs with them), so
// both PostgreSQL readers produce the same text. Unchanged TOASTed columns
// arrive as Value{Unchanged: true}.
//
// Schema changes: pgoutput carries no DDL, but sends a table's relation
// message again before its first change after one; the reader compares it
// (and the catalog) with the table's shape before and hands out an
// OpSchema change saying what changed (schema.go). A renamed table stops
// the stream with an error naming it and the position.
//
// A partitioned table is streamed under its own name: pgoutput names the
// leaf partition of each change, and the reader maps it to the table
// (partitions.go), follows partitions created while it runs, and stops at
// a TRUNCATE of part of the table and where a partition left it or joined
// it holding rows.
package pglogical
