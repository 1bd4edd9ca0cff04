package pgtrigger

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sluice-cdc/sluice"
	"github.com/sluice-cdc/sluice/source/internal/pgcatalog"
)

// change builds one Change from a changelog row.
func (r *Reader) change(info *tableInfo, id int64, op string, data, key []pgtype.Text, raw, nulls, note pgtype.Text) (sluice.Change, error) {
	t := info.table
	c := sluice.Change{Table: t}
	switch op {
	case "I":
		c.Op = sluice.OpInsert
	case "U":
		c.Op = sluice.OpUpdate
	case "D":
		c.Op = sluice.OpDelete
	case "T":
		c.Op = sluice.OpTruncate
		return c, nil
	case "P":
		// The TRUNCATE trigger names the partition; a reader that found
		// the partitions changed writes the event.
		e, err := pgcatalog.ParseEvent(note.String)
		if err != nil {
			return c, fmt.Errorf("changelog row %d of source table %s: %w", id, t.Name, err)
		}
		if e.Kind != "" {
			return c, fmt.Errorf("%w (changelog row %d)", e.Err(), id)
		}
		return c, &sluice.TableError{Table: t.Name, Err: fmt.Errorf(
			"partition %s of source table %s was truncated (changelog row %d): the target cannot truncate part of a table, and the stream cannot go on without it: "+
				"re-sync %s on the target from a fresh copy, then start the stream from the copy's position: %w", e.Partition, t.Name, id, t.Name, ErrPartialTruncate)}
	default:
		return c, fmt.Errorf("changelog row %d of source table %s: unknown op %q", id, t.Name, op)
	}
	if c.Op != sluice.OpDelete {
		if len(data) != len(t.Columns) {
			return c, fmt.Errorf("changelog row %d of source table %s: no row image", id, t.Name)
		}
		c.Row = make(sluice.Row, len(data))
		for i, v := range data {
			c.Row[i] = value(v)
		}
		if raw.Valid {
			legacy, err := fixJSON(info, c.Row, raw.String, nulls)
			if err != nil {
				return c, fmt.Errorf("changelog row %d of source table %s: %w", id, t.Name, err)
			}
			r.warnLegacyNulls(t, id, legacy)
		}
	}
	if c.Op != sluice.OpInsert {
		if len(key) == len(t.Key) {
			c.Key = make(sluice.Row, len(key))
			for i, v := range key {
				c.Key[i] = value(v)
			}
		} else if c.Op == sluice.OpUpdate {
			c.Key = t.KeyOf(c.Row)
		} else {
			return c, fmt.Errorf("changelog row %d of source table %s: delete without a key", id, t.Name)
		}
		for i, v := range c.Key {
			if v.Null {
				return c, fmt.Errorf("changelog row %d of source table %s: key column %s is NULL (was the trigger installed for another primary key? run `sluice source install`)",
					id, t.Name, t.Columns[t.Key[i]].Name)
			}
		}
	}
	return c, nil
}

func value(v pgtype.Text) sluice.Value {
	if !v.Valid {
		return sluice.Null
	}
	return sluice.Text(v.String)
}

// fixJSON replaces the values of json and jsonb columns with their text
// as stored (see jsonFields): json_populate_record normalises json text
// and reads the JSON value null as SQL NULL.
//
// row_to_json writes SQL NULL and the JSON value null alike. A NOT NULL
// column holds the JSON value; for a nullable one, nulls (the changelog
// row's nulls column, see tableSQL) says which it is. A column it does
// not name was captured by a trigger that did not tell them apart (one
// installed by an older sluice, or before the column was added or made
// nullable): it reads as SQL NULL, as sluice read it before, and fixJSON
// returns its name so that the reader can say so.
func fixJSON(info *tableInfo, row sluice.Row, raw string, nulls pgtype.Text) (legacy []string, err error) {
	fields, err := jsonFields(raw)
	if err != nil {
		return nil, fmt.Errorf("row image: %w", err)
	}
	var sqlNull map[string]bool
	if nulls.Valid {
		if err := json.Unmarshal([]byte(nulls.String), &sqlNull); err != nil {
			return nil, fmt.Errorf("record of the nulls in json columns %s: %w", nulls.String, err)
		}
	}
	for i, isJSON := range info.json {
		if !isJSON {
			continue
		}
		col := info.table.Columns[i]
		text, ok := fields[col.Name]
		switch {
		case !ok:
			row[i] = sluice.Null
		case text != "null" || !col.Nullable:
			row[i] = sluice.Text(text)
		default:
			isNull, known := sqlNull[col.Name]
			switch {
			case !known:
				legacy = append(legacy, col.Name)
				row[i] = sluice.Null
			case isNull:
				row[i] = sluice.Null
			default:
				row[i] = sluice.Text(text)
			}
		}
	}
	return legacy, nil
}

// warnLegacyNulls says, once per column, that changelog row id held a null
// in json columns cols that its trigger did not tell apart (see fixJSON):
// the target gets SQL NULL there even where the source holds the JSON
// value null.
func (r *Reader) warnLegacyNulls(t *sluice.Table, id int64, cols []string) {
	for _, c := range cols {
		k := t.Name.String() + "." + c
		if r.legacyNulls[k] {
			continue
		}
		r.legacyNulls[k] = true
		r.log.Warn("json column captured without telling SQL NULL from JSON null: read as SQL NULL",
			"table", t.Name.String(), "column", c, "changelog_row", id,
			"why", "captured by a trigger installed by an older sluice, or before the column was added or made nullable; rows captured since `sluice source install` are exact",
			"fix", "if the source row holds the JSON value null, update it on the source (or re-sync the table) so the target gets it")
	}
}
