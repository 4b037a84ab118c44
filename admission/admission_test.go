package admission

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

// Bytes in flight are held up to the bound and given back.
func TestController_HoldsUpToTheBound(t *testing.T) {
	c := New(100)
	if !c.Hold(60) || c.Hold(41) || !c.Hold(40) {
		t.Fatal("want 60 and 40 to fit in 100, 41 more not")
	}
	c.Release(60)
	if !c.Hold(60) {
		t.Fatal("released bytes did not come back")
	}
}

// Large bodies are keyed within LargeBudget at once, with the collector
// at KeyingGCPercent meanwhile and the former GOGC after; small bodies
// never wait.
func TestController_LargeBodiesTakeTurnsWithTheCollectorTightened(t *testing.T) {
	c := New(0)
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	done, err := c.KeyLarge(context.Background(), LargeBudget)
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(KeyingGCPercent); got != KeyingGCPercent {
		t.Errorf("GOGC %d while keying, want %d", got, KeyingGCPercent)
	}
	small, err := c.KeyLarge(context.Background(), LargeBody-1)
	if err != nil {
		t.Fatalf("a small body waited: %v", err)
	}
	small()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.KeyLarge(ctx, LargeBody); err == nil {
		t.Fatal("a second large body was keyed beyond the budget")
	}
	done()
	done() // once
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC %d after keying, want the former 100", got)
	}
	again, err := c.KeyLarge(context.Background(), LargeBody)
	if err != nil {
		t.Fatalf("after the turn ended: %v", err)
	}
	again()
}
