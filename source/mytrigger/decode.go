package mytrigger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-cdc/sluice"
)

// change builds one Change from a changelog row.
func (r *Reader) change(info *tableInfo, lr logRow) (sluice.Change, error) {
	t := info.table
	c := sluice.Change{Table: t}
	switch lr.op {
	case "I":
		c.Op = sluice.OpInsert
	case "U":
		c.Op = sluice.OpUpdate
	case "D":
		c.Op = sluice.OpDelete
	default:
		return c, fmt.Errorf("changelog row %d of source table %s: unknown op %q", lr.id, t.Name, lr.op)
	}
	all := make([]int, len(t.Columns))
	for i := range all {
		all[i] = i
	}
	var err error
	if c.Op != sluice.OpDelete {
		if !lr.d.Valid {
			return c, fmt.Errorf("changelog row %d of source table %s: no row image (larger than max_allowed_packet when captured?)", lr.id, t.Name)
		}
		if c.Row, err = decodeImage(info, lr.d.String, all); err != nil {
			return c, fmt.Errorf("changelog row %d of source table %s: row image: %w", lr.id, t.Name, err)
		}
	}
	if c.Op != sluice.OpInsert {
		if !lr.k.Valid {
			return c, fmt.Errorf("changelog row %d of source table %s: no key", lr.id, t.Name)
		}
		if c.Key, err = decodeImage(info, lr.k.String, t.Key); err != nil {
			return c, fmt.Errorf("changelog row %d of source table %s: key: %w", lr.id, t.Name, err)
		}
		for i, v := range c.Key {
			if v.Null {
				return c, fmt.Errorf("changelog row %d of source table %s: key column %s is NULL (was the trigger installed for another primary key? run `sluice source install`)",
					lr.id, t.Name, t.Columns[t.Key[i]].Name)
			}
		}
	}
	if lr.at.Valid {
		if at, err := formatTimestamp(lr.at.String, 6); err == nil {
			if tm, err := time.Parse(time.DateTime+".000000", at); err == nil {
				c.Time = tm
			}
		}
	}
	return c, nil
}

// decodeImage reads a JSON_OBJECT image of the columns cols.
func decodeImage(info *tableInfo, s string, cols []int) (sluice.Row, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	row := make(sluice.Row, len(cols))
	for j, i := range cols {
		col := info.table.Columns[i]
		v, ok := m[col.Name]
		if !ok {
			return nil, fmt.Errorf("column %s not captured: the trigger is stale, run `sluice source install` and restart", col.Name)
		}
		val, err := info.captures[i].decode(v, info.scales[i])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", col.Name, err)
		}
		row[j] = val
	}
	return row, nil
}
