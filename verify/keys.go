package verify

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/tablecopy"
)

// rowHash is one row as a leaf comparison sees it: its key (this side's
// raw text), canonical key text (equal on both sides for equal keys) and
// the md5 of its canonical row text.
type rowHash struct {
	raw  sluice.Row
	key  string
	hash string
}

// rowSet is a side's rows of a leaf, by canonical key, in the order read.
type rowSet struct {
	order []string
	rows  map[string]rowHash
}

func newRowSet() *rowSet { return &rowSet{rows: map[string]rowHash{}} }

func (s *rowSet) add(rs []rowHash) {
	for _, r := range rs {
		if _, ok := s.rows[r.key]; !ok {
			s.order = append(s.order, r.key)
		}
		s.rows[r.key] = r
	}
}

func (s *rowSet) hash(k string) string { return s.rows[k].hash }

// onlyIn returns the raw keys of a that b lacks.
func onlyIn(a, b *rowSet) []sluice.Row {
	var out []sluice.Row
	for _, k := range a.order {
		if _, ok := b.rows[k]; !ok {
			out = append(out, a.rows[k].raw)
		}
	}
	return out
}

// candidates returns the canonical keys whose hash differs between the
// source's rows a and the target's b: a's keys in order, then b's own.
func candidates(a, b *rowSet) []string {
	var out []string
	for _, k := range a.order {
		if a.hash(k) != b.hash(k) {
			out = append(out, k)
		}
	}
	for _, k := range b.order {
		if _, ok := a.rows[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// verdict is what a key's three hashes say (S1, T, S2; "" for absent).
type verdict int

const (
	same verdict = iota
	differs
	changing
)

// judge applies the round's rule to one key: equal when the target
// agrees with either source snapshot, different when the source held one
// value through both, else still changing.
func judge(s1, t, s2 string) verdict {
	switch {
	case t == s2 || t == s1:
		return same
	case s1 == s2:
		return differs
	}
	return changing
}

func rowHashes(ctx context.Context, s Snapshot, sp *spec, where string) ([]rowHash, error) {
	rows, err := s.Query(ctx, sp.rowHashQuery(where))
	if err != nil {
		return nil, fmt.Errorf("hash the rows of table %s: %w", sp.name, err)
	}
	nk := len(sp.keyIdents)
	out := make([]rowHash, len(rows))
	for i, r := range rows {
		raw := make(sluice.Row, nk)
		for j := range nk {
			raw[j] = sluice.Text(deref(r[j]))
		}
		out[i] = rowHash{raw: raw, key: deref(r[nk]), hash: deref(r[nk+1])}
	}
	return out, nil
}

func columnHashes(ctx context.Context, s Snapshot, sp *spec, keys []sluice.Row) (map[string][]*string, error) {
	rows, err := s.Query(ctx, sp.columnHashQuery(sp.keysWhere(keys)))
	if err != nil {
		return nil, fmt.Errorf("hash the columns of %d rows of table %s: %w", len(keys), sp.name, err)
	}
	out := map[string][]*string{}
	for _, r := range rows {
		out[deref(r[0])] = r[1:]
	}
	return out, nil
}

// differingColumns names the columns whose hashes differ.
func differingColumns(cols []sluice.Column, a, b []*string) []string {
	var out []string
	for i, c := range cols {
		if i >= len(a) || i >= len(b) || deref(a[i]) != deref(b[i]) || (a[i] == nil) != (b[i] == nil) {
			out = append(out, c.Name)
		}
	}
	return out
}

// compareKeys compares a leaf range row by row, in rounds like
// compareRanges' but per key, and adds the real differences to tr.
func (v *run) compareKeys(ctx context.Context, tb *table, tr *TableReport, r tablecopy.Range) error {
	return v.compareRows(ctx, tb, tr, tb.src.where(r), tb.tgt.where(r))
}

// compareRows compares the rows that srcWhere selects on the source and
// tgtWhere on the target, as compareKeys does.
func (v *run) compareRows(ctx context.Context, tb *table, tr *TableReport, srcWhere, tgtWhere string) error {
	found := map[string]bool{}
	var unsettled []string
	for round := 0; round < v.cfg.Rounds; round++ {
		again, err := v.keyRound(ctx, tb, tr, srcWhere, tgtWhere, found)
		if err != nil {
			return err
		}
		unsettled = again
		if len(again) == 0 {
			break
		}
	}
	for _, k := range unsettled {
		tr.Unsettled = append(tr.Unsettled, "key "+k)
	}
	return nil
}

// keyRound runs one round over a leaf and returns the keys (formatted)
// still changing.
func (v *run) keyRound(ctx context.Context, tb *table, tr *TableReport, srcWhere, tgtWhere string, found map[string]bool) ([]string, error) {
	release, err := v.round(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s1, pos, err := v.sourceSnap(ctx)
	if err != nil {
		return nil, err
	}
	defer s1.Close()
	// Both servers at once, as in compareRanges.
	var as []rowHash
	var aerr error
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		as, aerr = rowHashes(ctx, s1, tb.src, srcWhere)
	}()
	t, err := v.targetSnap(ctx, pos)
	if err != nil {
		<-hashed
		return nil, err
	}
	defer t.Close()
	rs, err := rowHashes(ctx, t, tb.tgt, tgtWhere)
	<-hashed
	if err = errors.Join(aerr, err); err != nil {
		return nil, err
	}
	a, b := newRowSet(), newRowSet()
	a.add(as)
	b.add(rs)
	// A key on one side only may sit in the other side's range under
	// another order (collations differ between engines): look it up.
	if keys := onlyIn(a, b); len(keys) > 0 {
		if rs, err = rowHashes(ctx, t, tb.tgt, tb.tgt.keysWhere(keys)); err != nil {
			return nil, err
		}
		b.add(rs)
	}
	if keys := onlyIn(b, a); len(keys) > 0 {
		if rs, err = rowHashes(ctx, s1, tb.src, tb.src.keysWhere(keys)); err != nil {
			return nil, err
		}
		a.add(rs)
	}
	cand := candidates(a, b)
	if len(cand) == 0 {
		return nil, nil
	}
	raws := make([]sluice.Row, len(cand))
	for i, k := range cand {
		if row, ok := a.rows[k]; ok {
			raws[i] = row.raw
		} else {
			raws[i] = b.rows[k].raw
		}
	}
	s2, err := v.cfg.Source.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer s2.Close()
	c := newRowSet()
	if rs, err = rowHashes(ctx, s2, tb.src, tb.src.keysWhere(raws)); err != nil {
		return nil, err
	}
	c.add(rs)
	var again []string
	var diffKeys []sluice.Row
	var diffs []Diff
	for i, k := range cand {
		name := tb.desc.FormatKey(raws[i])
		switch judge(a.hash(k), b.hash(k), c.hash(k)) {
		case same:
			continue
		case changing:
			again = append(again, name)
			continue
		}
		if found[k] {
			continue
		}
		found[k] = true
		d := Diff{Key: name, Raw: raws[i], canon: k}
		switch {
		case b.hash(k) == "":
			d.Kind = Missing
		case c.hash(k) == "":
			d.Kind = Extra
		default:
			d.Kind = Different
			diffKeys = append(diffKeys, raws[i])
		}
		diffs = append(diffs, d)
	}
	if len(diffKeys) > 0 {
		sc, err := columnHashes(ctx, s2, tb.src, diffKeys)
		if err != nil {
			return nil, err
		}
		tc, err := columnHashes(ctx, t, tb.tgt, diffKeys)
		if err != nil {
			return nil, err
		}
		for i := range diffs {
			if diffs[i].Kind != Different {
				continue
			}
			diffs[i].Columns = differingColumns(tb.src.cols, sc[diffs[i].canon], tc[diffs[i].canon])
		}
	}
	for _, d := range diffs {
		if len(tr.Diffs) >= v.cfg.MaxDiffs {
			tr.Truncated = true
			break
		}
		tr.Diffs = append(tr.Diffs, d)
	}
	return again, nil
}
