package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice"
)

func TestCommitAndGet(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get("orders"); err != nil || ok {
		t.Fatalf("Get on empty store = %v, %v; want no record", ok, err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	cps := []sluice.Checkpoint{
		{Stream: "orders", Seq: 1, Position: sluice.Position{Kind: "pgtrigger", Token: "a"}, Applied: 10, Time: now},
		{Stream: "orders", Seq: 2, Position: sluice.Position{Kind: "pgtrigger", Token: "b"}, Applied: 25, Time: now},
		{Stream: "users", Seq: 1, Position: sluice.Position{Kind: "pglogical", Token: "0/16B3748"}, Applied: 3, Time: now},
	}
	for _, cp := range cps {
		if err := s.Commit(cp); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetError("orders", "boom"); err != nil {
		t.Fatal(err)
	}
	r, ok, err := s.Get("orders")
	if err != nil || !ok {
		t.Fatalf("Get = %v, %v", ok, err)
	}
	if r.Seq != 2 || r.Position.Token != "b" || r.Applied != 25 || r.LastError != "boom" || !r.Time.Equal(now) {
		t.Fatalf("record = %+v", r)
	}
	// A commit clears the error: the stream is applying again.
	if err := s.Commit(sluice.Checkpoint{Stream: "orders", Seq: 3, Position: sluice.Position{Kind: "pgtrigger", Token: "c"}, Applied: 30}); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := s.Get("orders"); r.LastError != "" || r.Seq != 3 {
		t.Fatalf("after commit: %+v", r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: records survive.
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %v, %v", list, err)
	}
}

func TestSecondOpenFailsNamingPid(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open: %v, want ErrInUse", err)
	}
	want := fmt.Sprintf("state dir %s is in use by another sluice (pid %d)", dir, os.Getpid())
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
	if _, err := ReadOnly(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("ReadOnly while open: %v, want ErrInUse", err)
	}
	s.Close()
	s2, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s2.Close()
	ro, err := ReadOnly(dir)
	if err != nil {
		t.Fatalf("ReadOnly after Close: %v", err)
	}
	ro.db.Close()
}
