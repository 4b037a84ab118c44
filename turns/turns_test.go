package turns

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A picker waits for another picker's turn in the same key, never for
// its own nor for one in another key; settling the turn frees the key.
func TestTake_WaitsForOtherPickersOnly(t *testing.T) {
	c := &fakeClock{t: time.Unix(100, 0)}
	tb := New(Config{Now: c.now})
	a1, busy, _ := tb.Take("qwen3", "gw-a")
	if a1 == 0 || busy != nil {
		t.Fatalf("first turn: id %d busy %v, want a turn", a1, busy)
	}
	a2, busy, _ := tb.Take("qwen3", "gw-a")
	if a2 == 0 || a2 == a1 || busy != nil {
		t.Fatalf("the same picker's second turn: id %d (first %d) busy %v, want a new turn", a2, a1, busy)
	}
	if id, busy, _ := tb.Take("llama", "gw-b"); id == 0 || busy != nil {
		t.Fatalf("another key: id %d busy %v, want a turn", id, busy)
	}
	id, busy, lapse := tb.Take("qwen3", "gw-b")
	if id != 0 || busy == nil || !lapse.Equal(c.t.Add(DefaultHold)) {
		t.Fatalf("another picker in a held key: id %d busy %v lapse %v, want to wait for gw-a's first turn until %v", id, busy, lapse, c.t.Add(DefaultHold))
	}
	if n := tb.Settle("gw-b", []uint64{a1}); n != 0 || closed(busy) {
		t.Fatalf("another picker settled gw-a's turn (%d, closed %v)", n, closed(busy))
	}
	if n := tb.Settle("gw-a", []uint64{a1, 999}); n != 1 || !closed(busy) {
		t.Fatalf("settle: %d ended, busy closed %v; want 1 and the waiter woken", n, closed(busy))
	}
	if id, busy, _ := tb.Take("qwen3", "gw-b"); id != 0 || busy == nil {
		t.Fatalf("gw-a's second turn still holds the key: id %d busy %v", id, busy)
	}
	tb.Settle("gw-a", []uint64{a2})
	if id, busy, _ := tb.Take("qwen3", "gw-b"); id == 0 || busy != nil {
		t.Fatalf("after gw-a's turns: id %d busy %v, want a turn", id, busy)
	}
	if s := tb.Stats(); s.Taken != 4 || s.Settled != 2 || s.Outstanding != 2 {
		t.Fatalf("stats %+v, want 4 taken, 2 settled, 2 outstanding", s)
	}
}

// An unsettled turn lapses after Hold: its waiter is woken and the next
// Take is granted.
func TestTake_UnsettledTurnLapses(t *testing.T) {
	c := &fakeClock{t: time.Unix(100, 0)}
	tb := New(Config{Now: c.now, Hold: 30 * time.Millisecond})
	tb.Take("m", "dead")
	_, busy, _ := tb.Take("m", "live")
	c.add(29 * time.Millisecond)
	if id, _, _ := tb.Take("m", "live"); id != 0 {
		t.Fatal("granted before the turn lapsed")
	}
	c.add(time.Millisecond)
	id, b2, _ := tb.Take("m", "live")
	if id == 0 || b2 != nil || !closed(busy) {
		t.Fatalf("at the lapse: id %d busy %v, first waiter woken %v; want a turn", id, b2, closed(busy))
	}
	if s := tb.Stats(); s.Lapsed != 1 {
		t.Fatalf("stats %+v, want 1 lapsed", s)
	}
}

// Past MaxTurns nothing is granted and nothing waits; an empty picker or
// key takes no turn.
func TestTake_BoundAndEmptyIDs(t *testing.T) {
	tb := New(Config{MaxTurns: 2})
	tb.Take("m", "a")
	tb.Take("n", "a")
	if id, busy, _ := tb.Take("o", "b"); id != 0 || busy != nil {
		t.Fatalf("past the bound: id %d busy %v, want none and no wait", id, busy)
	}
	if s := tb.Stats(); s.Refused != 1 || s.Outstanding != 2 {
		t.Fatalf("stats %+v, want 1 refused, 2 outstanding", s)
	}
	for _, c := range [][2]string{{"", "p"}, {"k", ""}} {
		if id, busy, _ := tb.Take(c[0], c[1]); id != 0 || busy != nil {
			t.Fatalf("Take(%q, %q): id %d busy %v, want none", c[0], c[1], id, busy)
		}
	}
}

// Wait returns once the other picker's turn is settled, with a turn;
// without a settle it gives up at its bound with none.
func TestWait_UntilSettledOrBound(t *testing.T) {
	tb := New(Config{Hold: time.Minute})
	a, _, _ := tb.Take("m", "a")
	got := make(chan uint64, 1)
	go func() {
		id, _ := tb.Wait(context.Background(), "m", "b", time.Minute)
		got <- id
	}()
	// Before the settle the key is held (a Take is refused), so a turn
	// returned is one granted after it.
	tb.Settle("a", []uint64{a})
	select {
	case id := <-got:
		if id == 0 {
			t.Fatal("no turn after the settle")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the settle")
	}
	tb.Take("m", "c") // b's turn is outstanding too; c's follows it
	id, waited := tb.Wait(context.Background(), "m", "d", 20*time.Millisecond)
	if id != 0 || waited < 20*time.Millisecond {
		t.Fatalf("bounded wait: id %d after %v, want none after the 20 ms bound", id, waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if id, _ := tb.Wait(ctx, "m", "d", time.Minute); id != 0 {
		t.Fatalf("cancelled wait: id %d, want none", id)
	}
}

// A picker that keeps taking turns cannot keep another out: once another
// picker's lookup waits, the first takes no new turn until the waiter
// had its own, in the order they came.
func TestWait_WaitersGoInTheOrderTheyCame(t *testing.T) {
	tb := New(Config{Hold: time.Minute})
	a1, _, _ := tb.Take("m", "a")
	got := make(chan uint64, 1)
	go func() {
		id, _ := tb.Wait(context.Background(), "m", "b", time.Minute)
		got <- id
	}()
	waitFor(t, tb, 1)
	if id, busy, _ := tb.Take("m", "a"); id != 0 || busy == nil {
		t.Fatalf("a took turn %d while b waited, want none", id)
	}
	tb.Settle("a", []uint64{a1})
	b := <-got
	if b == 0 {
		t.Fatal("b got no turn after a's was settled")
	}
	if id, _, _ := tb.Take("m", "a"); id != 0 {
		t.Fatalf("a took turn %d while b's was outstanding", id)
	}
	tb.Settle("b", []uint64{b})
	if id, busy, _ := tb.Take("m", "a"); id == 0 || busy != nil {
		t.Fatalf("after b's turn: a's Take %d busy %v, want a turn", id, busy)
	}
}

// waitFor waits until n lookups wait in tb.
func waitFor(t *testing.T, tb *Table, n int) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		w := tb.Stats().Waiting
		return w == n, fmt.Sprintf("%d lookups wait, want %d", w, n)
	})
}

// A Waiter driven by hand, as a simulation does on its virtual clock:
// only the waiters of other pickers ahead of it hold it back, and a
// waiter that took its turn holds the others back by that turn.
func TestWaiter_TakesItsTurnInTheOrderItJoined(t *testing.T) {
	c := &fakeClock{t: time.Unix(100, 0)}
	tb := New(Config{Now: c.now})
	a, _, _ := tb.Take("qwen3", "gw-a")
	b := tb.Join("qwen3", "gw-b")
	b2 := tb.Join("qwen3", "gw-b") // the same picker, behind b: b does not hold it back
	cw := tb.Join("qwen3", "gw-c")
	for name, w := range map[string]*Waiter{"b": b, "b2": b2, "c": cw} {
		if id, busy, lapse := w.Take(); id != 0 || busy == nil || !lapse.Equal(c.t.Add(DefaultHold)) {
			t.Fatalf("%s while gw-a's turn is out: id %d busy %v lapse %v, want to wait until %v", name, id, busy, lapse, c.t.Add(DefaultHold))
		}
	}
	tb.Settle("gw-a", []uint64{a})
	if id, busy, lapse := cw.Take(); id != 0 || busy == nil || !lapse.IsZero() {
		t.Fatalf("c behind gw-b's waiters: id %d busy %v lapse %v, want held back by a waiter (zero lapse)", id, busy, lapse)
	}
	if id, busy, _ := tb.Take("qwen3", "gw-a"); id != 0 || busy == nil {
		t.Fatalf("a lookup that did not join, behind every waiter: id %d busy %v, want held back", id, busy)
	}
	idB2, busy, _ := b2.Take()
	if idB2 == 0 || busy != nil {
		t.Fatalf("b2, with only its own picker's waiter ahead: id %d busy %v, want its turn", idB2, busy)
	}
	idB, busy, _ := b.Take()
	if idB == 0 || busy != nil {
		t.Fatalf("b: id %d busy %v, want its turn", idB, busy)
	}
	b.Leave()
	b2.Leave()
	b.Leave() // twice: harmless
	if id, busy, lapse := cw.Take(); id != 0 || busy == nil || !lapse.Equal(c.t.Add(DefaultHold)) {
		t.Fatalf("c while gw-b's turns are out: id %d busy %v lapse %v, want to wait for them", id, busy, lapse)
	}
	tb.Settle("gw-b", []uint64{idB2})
	if id, _, _ := cw.Take(); id != 0 {
		t.Fatalf("c with one of gw-b's turns still out: got turn %d", id)
	}
	tb.Settle("gw-b", []uint64{idB})
	idC, busy, _ := cw.Take()
	if idC == 0 || busy != nil {
		t.Fatalf("c once gw-b's turns are settled: id %d busy %v, want its turn", idC, busy)
	}
	cw.Leave()
	tb.Settle("gw-c", []uint64{idC})
	if s := tb.Stats(); s.Waiting != 0 || s.Outstanding != 0 || len(tb.keys) != 0 {
		t.Fatalf("after every waiter left and every turn settled: %+v, %d keys; want an empty table", s, len(tb.keys))
	}
}
