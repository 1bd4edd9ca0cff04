// Package postgres is the PostgreSQL apply target. In its default,
// pipelined mode a batch costs one network round trip whatever its size:
// BEGIN, one multi-row statement per table and operation, the checkpoint
// upsert and COMMIT go to the server in one write with a single Sync, and
// their results come back in one read.
package postgres
