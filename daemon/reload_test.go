package daemon

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
)

// TestReloadKeysClassifyEveryOption fails when a StreamOptions field is
// added without deciding how a reload treats it.
func TestReloadKeysClassifyEveryOption(t *testing.T) {
	typ := reflect.TypeFor[StreamOptions]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if _, ok := reloadKeys[name]; !ok && !slices.Contains(notSettings, name) {
			t.Errorf("StreamOptions.%s is neither in reloadKeys nor in notSettings", name)
		}
	}
	for name := range reloadKeys {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("reloadKeys names %s, which StreamOptions lacks", name)
		}
	}
}

func TestDiffOptions(t *testing.T) {
	base := StreamOptions{
		ID:        "orders",
		SourceURL: "postgres://app:old@db1:5432/shop",
		TargetURL: "postgres://sluice:pw@replica:5432/shop",
		Tables:    []sluice.TableName{{Schema: "public", Name: "orders"}},
		StateDir:  "/var/lib/sluice",
		BatchSize: 1000, KillBudget: 5 * time.Second,
	}
	for _, tc := range []struct {
		name            string
		edit            func(o *StreamOptions)
		stream, process []string
	}{
		{"nothing", func(o *StreamOptions) {}, nil, nil},
		{"logger is not a setting", func(o *StreamOptions) { o.Logger = nil; o.OnStart = nil }, nil, nil},
		{"tables", func(o *StreamOptions) {
			o.Tables = append(slices.Clone(o.Tables), sluice.TableName{Schema: "public", Name: "lines"})
		}, []string{"tables"}, nil},
		{"controller settings", func(o *StreamOptions) { o.KillBudget = 2 * time.Second; o.MaxLanes = 4 },
			[]string{"max_lanes", "kill_budget"}, nil},
		{"rotated password", func(o *StreamOptions) { o.SourceURL = "postgres://app:new@db1:5432/shop" },
			[]string{"source password"}, nil},
		{"another server", func(o *StreamOptions) { o.TargetURL = "postgres://sluice:pw@replica2:5432/shop" },
			nil, []string{"target"}},
		{"source mode and a batch size", func(o *StreamOptions) { o.SourceMode = "trigger"; o.BatchSize = 10 },
			[]string{"apply_batch_size"}, []string{"source_mode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := base
			tc.edit(&n)
			d := diffOptions(base, n)
			if !slices.Equal(d.stream, tc.stream) || !slices.Equal(d.process, tc.process) {
				t.Errorf("diff = stream %q, process %q; want %q, %q", d.stream, d.process, tc.stream, tc.process)
			}
			kept := keepProcessSettings(base, n)
			if again := diffOptions(base, kept); len(again.process) != 0 {
				t.Errorf("keepProcessSettings left %q changed", again.process)
			}
			if tc.name == "rotated password" && kept.SourceURL != n.SourceURL {
				t.Errorf("the new password was not taken: %s", kept.SourceURL)
			}
		})
	}
}
