package daemon

// FixedMemoryBytes is the part of the memory formula that no setting
// moves: the Go runtime, the drivers' buffers, the source's decoded
// events and the tables' descriptions, with room for the garbage the
// collector has not reached yet. It was 32 MiB while a change was copied
// six times on its way to a batch; with one copy and the rows decoded
// without go-mysql's per-row values, 20 MiB keeps a default stream's
// resident size under 100 MB through a catch-up (issue 32) for about a
// tenth more of its CPU in the collector.
const FixedMemoryBytes = 20 << 20

// MemoryBound is what the settings of the streams of one process allow it
// to hold on the Go heap, the README's memory formula:
//
//	fixed + Σ streams (Q + R + min(L × T × B, Q/2))
//
// Q is --max-queue-bytes: every change the stream holds, whatever the
// size of the backlog or of one source transaction (stream.Config's
// MaxQueueBytes shares). R is the log reader's read-ahead
// (ReadAheadBytes). The last term is the statements built from the
// batches in flight, about as many bytes as their changes: B
// (--max-batch-bytes) per transaction, T of them per lane (two when a lane
// chains its next transaction behind the one in flight), L lanes
// (--max-lanes); the batches' changes sit in the lanes' queues, half of Q,
// so the statements never need more than that either.
func MemoryBound(streams []StreamOptions) int64 {
	total := int64(FixedMemoryBytes)
	for _, o := range streams {
		q := queueBytes(o)
		lanes := int64(max(o.MaxLanes, 1))
		per := o.MaxBatchBytes
		if per <= 0 {
			per = q / 2
		}
		tx := int64(2)
		if o.NoOverlap {
			tx = 1
		}
		total += q + ReadAheadBytes(q) + min(lanes*tx*per, q/2)
	}
	return total
}
