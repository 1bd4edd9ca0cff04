package source

import (
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	if !b.TryTake(60) || !b.TryTake(40) {
		t.Fatal("takes within the budget were refused")
	}
	if b.TryTake(1) {
		t.Fatal("a take past the budget was allowed")
	}
	got := make(chan bool)
	go func() {
		for !b.TryTake(50) {
			<-b.Freed()
		}
		got <- true
	}()
	select {
	case <-got:
		t.Fatal("a waiting take went through before bytes were given back")
	case <-time.After(50 * time.Millisecond): // it must still be waiting
	}
	b.Give(60)
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting take was not woken by Give")
	}
	if b.Used() != 90 {
		t.Errorf("used %d, want 90", b.Used())
	}
	// A change bigger than the whole budget passes when nothing is held.
	b.Give(90)
	if !b.TryTake(1000) {
		t.Error("an oversized take was refused with nothing held")
	}
}
