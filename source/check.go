package source

import (
	"strings"

	sluice "github.com/sluice-cdc/sluice"
)

// Check is one line of a preflight report: what was checked, on which
// object, and what was found (or what sync start would do).
type Check struct {
	OK bool `json:"ok"`
	// Warning marks a passed check that found something the user should
	// know (a generated column computed differently on the target).
	Warning bool   `json:"warning,omitempty"`
	Object  string `json:"object"`
	Detail  string `json:"detail"`
}

// Report is what a reader's read-only Check found: one line per check,
// and the tables as sync start would describe them to the target.
type Report struct {
	Checks []Check         `json:"checks"`
	Tables []*sluice.Table `json:"-"`
	// ForeignKeys are the source's foreign keys of the tables, or
	// referencing them, where sluice carries out their actions (sources
	// whose log omits the rows the actions change).
	ForeignKeys []sluice.ForeignKey `json:"-"`
}

// Pass records a check that passed.
func (r *Report) Pass(object, detail string) {
	r.Checks = append(r.Checks, Check{OK: true, Object: object, Detail: detail})
}

// Fail records a check that failed and returns err, so that a Check can
// end with `return rep, rep.Fail(obj, err)`.
func (r *Report) Fail(object string, err error) error {
	r.Checks = append(r.Checks, Check{Object: object, Detail: err.Error()})
	return err
}

// TableList names tables for a report line: "public.a, public.b".
func TableList(tables []sluice.TableName) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}
