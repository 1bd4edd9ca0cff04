package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
	"github.com/sluice-cdc/sluice/checkpoint"
	"github.com/sluice-cdc/sluice/source/binlog"
	"github.com/sluice-cdc/sluice/source/mytrigger"
	"github.com/sluice-cdc/sluice/source/pglogical"
	"github.com/sluice-cdc/sluice/source/pgtrigger"
	"github.com/sluice-cdc/sluice/stream"
)

// coversOfKind compares the positions of each reader kind (see
// stream.Config.Covers).
var coversOfKind = map[string]func(p, c sluice.Position) (bool, bool, error){
	pglogical.Kind: pglogical.Covers,
	binlog.Kind:    binlog.Covers,
	pgtrigger.Kind: pgtrigger.Covers,
	mytrigger.Kind: mytrigger.Covers,
}

// resume is where a stream starts.
type resume struct {
	// start is the checkpoint the reader opens at (zero: a new stream).
	start sluice.Checkpoint
	// lanes are the target's lane checkpoints, for the recovery.
	lanes []sluice.Checkpoint
	// olderTarget is set when the target's checkpoint is older than the
	// state file's: the target lost commits sluice made (a restore from a
	// backup) and the stream resumes from what the target holds, which the
	// source may no longer have.
	olderTarget *sluice.Checkpoint
}

// resumePoint reads where the stream stands. The target's checkpoints,
// written inside the transactions that applied the changes, are what the
// target holds: the stream resumes from them. The state file follows them
// (written after each commit), so it can be behind (a crash between the
// two) but never ahead, unless the target lost commits: then the stream
// resumes from the target's all the same — the source is told only what
// the target holds, so it may still have the changes since — and the
// reader refuses if it has not. A state file without any checkpoint on the
// target is refused: nothing says what the target holds.
func resumePoint(ctx context.Context, log *slog.Logger, store *checkpoint.Store, tgt target, id string) (resume, error) {
	rec, inFile, err := store.Get(id)
	if err != nil {
		return resume{}, err
	}
	rows, err := tgt.ReadCheckpoints(ctx, id)
	if err != nil {
		return resume{}, fmt.Errorf("read stream %s checkpoint from the target: %w", id, err)
	}
	fileCP := rec.Checkpoint()
	onTarget, ok := apply.Resume(rows)
	if !ok {
		if inFile && !fileCP.Position.IsZero() {
			return resume{}, fmt.Errorf("stream %s: the target holds no checkpoint for this stream, but the state file has one (seq %d, position %s, %d changes applied): "+
				"the target was restored from a backup taken before the stream, or sluice's checkpoint table on it was dropped, so nothing says which changes it holds; "+
				"sluice will not guess. Load the target's tables again and start the stream anew (another --stream-id, or remove the stream's state dir)",
				id, fileCP.Seq, fileCP.Position, fileCP.Applied)
		}
		return resume{start: sluice.Checkpoint{Stream: id}}, nil
	}
	r := resume{start: onTarget, lanes: rows}
	r.start.Stream = id
	// New checkpoints must be numbered past every lane's.
	for _, cp := range rows {
		r.start.Seq = max(r.start.Seq, cp.Seq)
	}
	switch {
	case inFile && r.start.Seq < fileCP.Seq:
		log.Warn("the target's checkpoint is older than the state file's: the target lost commits sluice made (was it restored from a backup?); resuming from what the target holds",
			"stream", id, "target_seq", r.start.Seq, "target_position", onTarget.Position.String(), "file_seq", fileCP.Seq, "file_position", fileCP.Position.String())
		r.olderTarget = &fileCP
	case inFile && r.start.Seq > fileCP.Seq:
		log.Info("target checkpoint is newer than the state file; resuming from the target's", "stream", id, "target_seq", r.start.Seq, "file_seq", fileCP.Seq)
	}
	return r, nil
}

// olderTargetError explains a reader's refusal to resume from a target
// checkpoint older than the state file's.
func olderTargetError(id string, onTarget sluice.Checkpoint, file sluice.Checkpoint, err error) error {
	return fmt.Errorf("stream %s: the target's checkpoint (seq %d, position %s) is older than the state file's (seq %d, position %s): "+
		"the target lost commits that sluice made (was it restored from a backup?), and the source no longer has every change since what the target holds, "+
		"so the target cannot be brought back to the source's rows by streaming; load the target's tables again and start the stream anew: %w",
		id, onTarget.Seq, onTarget.Position, file.Seq, file.Position, err)
}

// recovery works out, from the lanes' checkpoints on the target, which
// lanes committed changes past the checkpoint the stream resumes from (a
// stop that did not drain them), so that the stream skips them when read
// again (stream.Recovery). nil when there are none. It needs the lanes to
// have routed as the stream routes now; when the routing changed (a unique
// or foreign key added or dropped on the target), which of those changes
// each lane committed cannot be told, and they are applied again instead,
// which the writes survive except where a row's key moved back and forth.
func recovery(log *slog.Logger, r resume, routing string) (*stream.Recovery, error) {
	covers := coversOfKind[r.start.Position.Kind]
	var rec *stream.Recovery
	for _, cp := range r.lanes {
		if cp.Lanes <= 1 || cp.Last.IsZero() || cp.Last == r.start.Position {
			continue
		}
		if covers == nil {
			return nil, fmt.Errorf("stream %s: lane %d's checkpoint position %s was written by an unknown reader %q", r.start.Stream, cp.Lane, cp.Last, cp.Last.Kind)
		}
		covered, _, err := covers(r.start.Position, cp.Last)
		if err != nil {
			return nil, fmt.Errorf("stream %s: compare lane %d's last position %s with the checkpoint %s: %w", r.start.Stream, cp.Lane, cp.Last, r.start.Position, err)
		}
		if covered {
			continue // the lane's last change is at or before the checkpoint
		}
		if cp.Routing != routing {
			log.Warn("the stream stopped without draining its lanes, and their routing changed since (a unique or foreign key changed on the target): "+
				"the changes they committed past the checkpoint are applied again rather than skipped",
				"stream", r.start.Stream, "lane", cp.Lane, "lanes", cp.Lanes)
			return nil, nil
		}
		if rec == nil {
			rec = &stream.Recovery{Lanes: cp.Lanes, Last: map[int]sluice.Position{}}
		}
		if cp.Lanes != rec.Lanes {
			log.Warn("lane checkpoints name different lane counts; applying the changes past the checkpoint again rather than skipping them",
				"stream", r.start.Stream, "lanes", []int{rec.Lanes, cp.Lanes})
			return nil, nil
		}
		rec.Last[cp.Lane] = cp.Last
	}
	return rec, nil
}

// groupTarget is what routeGroups needs of a target.
type groupTarget interface {
	HasUniqueKeys(ctx context.Context, name sluice.TableName) (bool, error)
	ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error)
}

// routeGroups puts in one group the tables whose changes must go to one
// lane: a table with unique keys besides its primary key, and tables
// joined by foreign keys (into one group): the target's, and the source's
// that joined names (for a source whose foreign-key actions sluice carries
// out, apply.Cascades.Joined), whose actions must find the rows they
// change as the source had them. It returns each grouped table's group
// and the routing's fingerprint.
func routeGroups(ctx context.Context, tgt groupTarget, tables []*sluice.Table, sameSchema bool, joined [][2]sluice.TableName) (map[sluice.TableName]string, string, error) {
	parent := map[sluice.TableName]sluice.TableName{}
	var find func(sluice.TableName) sluice.TableName
	find = func(t sluice.TableName) sluice.TableName {
		if p, ok := parent[t]; ok && p != t {
			r := find(p)
			parent[t] = r
			return r
		}
		return t
	}
	grouped := map[sluice.TableName]bool{}
	for _, t := range tables {
		unique, err := tgt.HasUniqueKeys(ctx, t.Name)
		if err != nil {
			return nil, "", err
		}
		if unique {
			grouped[t.Name] = true
		}
		refs, err := tgt.ForeignKeys(ctx, t.Name)
		if err != nil {
			return nil, "", err
		}
		for _, ref := range refs {
			for _, o := range tables {
				if o.Name.Name == ref.Name && (!sameSchema || ref.Schema == "" || o.Name.Schema == ref.Schema) && o.Name != t.Name {
					a, b := find(t.Name), find(o.Name)
					if a != b {
						parent[a] = b
					}
					grouped[t.Name], grouped[o.Name] = true, true
				}
			}
		}
	}
	for _, j := range joined {
		a, b := find(j[0]), find(j[1])
		if a != b {
			parent[a] = b
		}
		grouped[j[0]], grouped[j[1]] = true, true
	}
	groups := map[sluice.TableName]string{}
	var lines []string
	for _, t := range tables {
		if grouped[t.Name] {
			groups[t.Name] = find(t.Name).String()
			lines = append(lines, t.Name.String()+"="+groups[t.Name])
		}
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(stream.RoutingVersion + "\n" + strings.Join(lines, "\n")))
	return groups, stream.RoutingVersion + ":" + hex.EncodeToString(sum[:8]), nil
}

// startCheckpoint records where a new stream starts, on the target and in
// the state file, before the stream reports itself started: a restart
// resumes there, never at the source's new "now".
func startCheckpoint(ctx context.Context, tgt target, store *checkpoint.Store, id string, pos sluice.Position, routing string) (sluice.Checkpoint, error) {
	cp := sluice.Checkpoint{Stream: id, Seq: 1, Position: pos, Time: time.Now().UTC(), Lane: 0, Lanes: 1, Last: pos, Routing: routing}
	if err := tgt.Apply(ctx, &apply.Batch{}, cp); err != nil {
		return sluice.Checkpoint{}, fmt.Errorf("stream %s: record the start position %s on the target: %w", id, pos, err)
	}
	if err := store.Commit(cp); err != nil {
		return sluice.Checkpoint{}, fmt.Errorf("stream %s: record the start position %s in the state file: %w", id, pos, err)
	}
	return cp, nil
}
