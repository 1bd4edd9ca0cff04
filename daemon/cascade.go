package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/apply"
)

// The foreign-key rule (docs/guarantees.md, Foreign keys): a source whose log carries
// the rows its foreign-key actions change (PostgreSQL, both modes) is
// applied with the target's actions off (session_replication_role =
// replica; foreign_key_checks = 0 on MySQL targets, always), and a source
// whose log omits them (MySQL/MariaDB, binlog and trigger modes) has its
// actions carried out by sluice on the target, from the source's
// definitions (apply.Cascades), in the same transaction and in source
// order. What it cannot follow is refused here, before any data moves.

// foreignKeySource is a reader of a source whose log omits the rows its
// foreign-key actions change: it gives the source's foreign keys.
type foreignKeySource interface {
	ForeignKeys() []sluice.ForeignKey
}

// wrappedReader is a reader that adds to another (the read ahead of
// Start-up overlap, sourceSide): Unwrap returns the one it wraps.
type wrappedReader interface {
	Unwrap() reader
}

// foreignKeysOf returns the foreign-key source rd is or wraps. A wrapper
// hides the methods of the reader it embeds from a type assertion: the
// read-ahead reader of a resumed stream once hid ForeignKeys, and every
// cascade after a restart (a target restart, kill -9, any run with a state
// file) was silently dropped.
func foreignKeysOf(rd any) (foreignKeySource, bool) {
	for rd != nil {
		if fs, ok := rd.(foreignKeySource); ok {
			return fs, true
		}
		w, ok := rd.(wrappedReader)
		if !ok {
			return nil, false
		}
		rd = w.Unwrap()
	}
	return nil, false
}

// streamCascades plans the source's foreign-key actions the target carries
// out for the stream's tables: nil for a source whose log carries their
// rows. It refuses, with a *apply.CascadeError, those it cannot follow.
// omits says the source's engine logs no row its foreign-key actions
// change (MySQL, MariaDB): a reader of it that does not give its foreign
// keys is refused rather than streamed without the actions, which would
// leave on the target every row they change, in silence.
func streamCascades(rd any, tables []*sluice.Table, omits bool) (*apply.Cascades, error) {
	fs, ok := foreignKeysOf(rd)
	if !ok {
		if omits {
			return nil, fmt.Errorf("the source reader (%T) does not give the source's foreign keys, whose actions sluice must carry out on the target "+
				"for a MySQL or MariaDB source (its log omits the rows they change): streaming on would leave those rows on the target; "+
				"this is a bug in sluice, please report it", rd)
		}
		return nil, nil
	}
	return apply.NewCascades(fs.ForeignKeys(), tables)
}

// CascadeTarget is what CheckCascadeTarget needs of a target.
type CascadeTarget interface {
	ForeignKeys(ctx context.Context, name sluice.TableName) ([]sluice.TableName, error)
}

// CheckCascadeTarget refuses a source foreign key with ON UPDATE CASCADE
// whose tables the target joins by a foreign key it checks on sluice's
// writes (a PostgreSQL target whose user may not set
// session_replication_role): sluice gives the referencing rows their new
// values before the referenced row has them, which a check at the end of
// each statement refuses. (The target's foreign keys with actions of
// their own are refused by its preflight.)
func CheckCascadeTarget(ctx context.Context, tgt CascadeTarget, cs *apply.Cascades) error {
	c, ok := tgt.(interface{ ChecksForeignKeys() bool })
	if !ok || !c.ChecksForeignKeys() {
		return nil
	}
	var errs []error
	for _, f := range cs.Acting() {
		if f.OnUpdate != sluice.FKCascade {
			continue
		}
		joined, err := tgt.ForeignKeys(ctx, f.Table)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(joined, func(n sluice.TableName) bool { return n.Name == f.RefTable.Name }) {
			continue
		}
		errs = append(errs, &apply.CascadeError{FK: f, Err: fmt.Errorf("source %s has ON UPDATE CASCADE, which sluice carries out on the target by giving the rows of %s their new values right before %s's row takes them, "+
			"but the target checks its foreign key between the two tables on sluice's writes (its user may not set session_replication_role) and would refuse that order: "+
			"GRANT SET ON PARAMETER session_replication_role to the target user (PostgreSQL 15 and later; or connect as a superuser), "+
			"or drop the target's foreign key", f, f.Table, f.RefTable)})
	}
	return errors.Join(errs...)
}
