// Package diagnose measures what the link to a target and the target itself
// cost sluice, so that a slow sync can be explained before it is tuned:
//
//   - RTT pings the target over one connection and returns the round-trip
//     distribution (`sluice diagnose rtt`).
//   - StaticBatch is the field's "static-batch test" (`sluice diagnose
//     static-batch`): on a scratch table it creates and drops, it applies
//     batches of fixed sizes through sluice's own targets in each apply mode
//     (per-row, pipelined), counts the network round trips each batch costs
//     and times its transaction, fits t(n) = R(n)·RTT + n·s (R(n) the counted
//     round trips, s the server's cost per change), and says whether a mode is
//     round-trip-bound — throughput that does not rise with the batch size,
//     which no batch-size setting can fix — and the largest batch that fits
//     the kill budget.
//
// The package owns the measurements, the fit and the verdict; it returns
// Report values and prints nothing. The CLI (cmd/sluice) formats them. It
// works on PostgreSQL and MySQL-family targets, uses sluice's apply targets
// (apply/postgres, apply/mysql) unchanged except for their Dial hook, through
// which it counts round trips: a client write that follows a server read is
// one round trip, and so is a connection's first write.
//
// Side effects on the target: the scratch table (created, refused if it
// already exists, dropped at the end — also after an error or a cancelled
// context, on a fresh context), and, as for `sluice sync start`, sluice's
// checkpoint table, which opening a target creates if it is missing; the
// checkpoint row the scratch batches write is deleted at the end.
package diagnose
