package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice"
)

// Key collations.
//
// A deterministic collation (every libc one, and every ICU one not created
// with deterministic = false) holds two strings equal only when their bytes
// are: it breaks ties by the bytes. A nondeterministic one holds strings
// equal that differ in bytes (case, accents, … as its locale says). The
// target finds the row an upsert updates through its primary key, and
// checks its unique indexes, under the key columns' collations: under a
// nondeterministic one, two keys the source keeps apart can be one key on
// the target, and INSERT … ON CONFLICT DO UPDATE of the second overwrites
// the first's row without an error. So before any data moves, every column
// of the source's primary key and of the target's unique indexes must
// compare on the target at least as strictly as on the source, unless the
// setting accepts the merge.

// allowMergeFlag is the setting that accepts key collations which merge
// keys, as the operator sets it.
const allowMergeFlag = "--allow-collation-merge"

// allowCollationMerge reports whether preflight accepts key columns whose
// target collation merges keys the source keeps distinct
// (Config.AllowCollationMerge).
func (t *Target) allowCollationMerge() bool { return t.cfg.AllowCollationMerge }

// probes are the pairs of strings a nondeterministic collation is asked
// about, to say in an error how it merges keys.
var probes = []struct{ a, b, what string }{
	{"a", "A", "case"},
	{"e", "é", "accents"},
	{"a", "a ", "trailing spaces"},
}

// probeCollations asks the target, for every nondeterministic collation of
// a key column, which of the probes it holds equal, and records the answer
// in the column. Only such columns cost a query.
func (t *Target) probeCollations(ctx context.Context, tcols []targetColumn) error {
	seen := map[string][]string{}
	for i := range tcols {
		c := &tcols[i]
		if c.collation.deterministic || c.pkPos == 0 && len(c.uniques) == 0 {
			continue
		}
		ident := pgx.Identifier{c.collation.schema, c.collation.name}.Sanitize()
		merges, ok := seen[ident]
		if !ok {
			var sel []string
			for _, p := range probes {
				sel = append(sel, fmt.Sprintf("%s = %s COLLATE %s", quoteLiteral(p.a), quoteLiteral(p.b), ident))
			}
			got := make([]bool, len(probes))
			dest := make([]any, len(probes))
			for j := range got {
				dest[j] = &got[j]
			}
			err := t.conn.QueryRow(ctx, "SELECT "+strings.Join(sel, ", ")).Scan(dest...)
			var pgErr *pgconn.PgError
			switch {
			case errors.As(err, &pgErr):
				// The server would not compare them (an encoding without
				// 'é', say): the error just says less.
				clear(got)
			case err != nil:
				return fmt.Errorf("compare strings under collation %s: %w", ident, err)
			}
			for j, p := range probes {
				if got[j] {
					merges = append(merges, fmt.Sprintf("%s ('%s' = '%s')", p.what, p.a, p.b))
				}
			}
			seen[ident] = merges
		}
		c.collation.merges = merges
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// keyColumn is a source column that is a key on the target.
type keyColumn struct {
	col   int    // index in the source columns
	roles string // what makes it a key, e.g. "primary key, unique index users_email_key"
	pk    bool   // part of the primary key
}

// keyColumns returns the source columns that are keys on the target: the
// source's primary key, and the columns of the target's unique indexes
// that the source has, in source column order.
func keyColumns(src *sluice.Table, byName map[string]*targetColumn) []keyColumn {
	var out []keyColumn
	for i, sc := range src.Columns {
		var roles []string
		pk := slices.Contains(src.Key, i)
		if pk {
			roles = append(roles, "primary key")
		}
		if tc := byName[sc.Name]; tc != nil {
			for _, u := range tc.uniques {
				roles = append(roles, "unique index "+u)
			}
		}
		if len(roles) > 0 {
			out = append(out, keyColumn{col: i, roles: strings.Join(roles, ", "), pk: pk})
		}
	}
	return out
}

// keyCollationErrors refuses every key column whose target collation may
// hold as equal two values the source keeps distinct, naming the column,
// both collations, how the target's merges values, and the fix.
func keyCollationErrors(src *sluice.Table, display string, byName map[string]*targetColumn, allowMerge bool) []error {
	if allowMerge {
		return nil
	}
	var errs []error
	for _, k := range keyColumns(src, byName) {
		sc := src.Columns[k.col]
		tc := byName[sc.Name]
		if tc == nil || tc.collation.deterministic {
			// Missing (reported already), not collatable, or compared
			// byte-exact: at least as strict as any source.
			continue
		}
		coll := tc.collation
		if sc.Collation != "" && (sc.Collation == coll.name || sc.Collation == coll.schema+"."+coll.name) {
			continue // the same collation on both sides
		}
		how := "nondeterministic: it holds strings equal whose bytes differ"
		if len(coll.merges) > 0 {
			how += ", here ignoring " + joinAnd(coll.merges)
		}
		consequence := "INSERT … ON CONFLICT DO UPDATE of one would silently overwrite the other's row"
		if !k.pk {
			consequence = "writing the second would fail on the index and stop the stream"
		}
		fix := fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN %s TYPE %s COLLATE "default" (or any deterministic collation)`, display, sc.Name, tc.fullType)
		if sc.Collation == "" {
			errs = append(errs, fmt.Errorf("column %s.%s (%s) would merge rows the source keeps apart: the source compares its values byte-exact, but the target's collation %q is %s, so two source keys that differ only so would be one key on the target and %s; "+
				"make its collation deterministic with %s, or, if no two source keys differ only so, accept the merge with %s",
				display, sc.Name, k.roles, coll.name, how, consequence, fix, allowMergeFlag))
			continue
		}
		errs = append(errs, fmt.Errorf("column %s.%s (%s) would merge rows the source keeps apart: the source compares its values under %s but the target under %q, a different collation, %s, so two keys the source's keeps apart can be equal under the target's and %s; "+
			"make its collation deterministic with %s, or, if no two source keys are equal under %q, accept the merge with %s",
			display, sc.Name, k.roles, sc.Collation, coll.name, how, consequence, fix, coll.name, allowMergeFlag))
	}
	return errs
}

// joinAnd joins phrases as "a, b and c".
func joinAnd(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
