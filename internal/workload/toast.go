package workload

// RequiredTextColumn is the column of wl_items that holds a large text
// PostgreSQL stores out of line (TOAST), as body does, but NOT NULL, as
// ordinary application schemas have it. An update of the row's other
// columns leaves it out of a PostgreSQL source's log ("unchanged"), so the
// target must update the row in place: an upsert that leaves a NOT NULL
// column out fails on both target engines, even when the row exists.
// Every workload has it; keep-toast, update and the key changes leave it
// unchanged as they leave body.
const RequiredTextColumn = "body_required"

// addRequiredText gives the schema's items table its NOT NULL TOASTed
// text column.
func addRequiredText(s *Schema) {
	t := s.Table(ItemsTable)
	t.Columns = append(t.Columns, Column{Name: RequiredTextColumn, Type: LongText, NotNull: true})
}
