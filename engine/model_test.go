package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// recorder keeps every event, slices copied.
type recorder struct{ evs []Event }

func (r *recorder) emit(ev *Event) {
	c := *ev
	c.Blocks, c.Stored, c.Evicted = slices.Clone(ev.Blocks), slices.Clone(ev.Stored), slices.Clone(ev.Evicted)
	r.evs = append(r.evs, c)
}

func (r *recorder) find(kind EventKind, id ID) (Event, bool) {
	for _, ev := range r.evs {
		if ev.Kind == kind && ev.ID == id {
			return ev, true
		}
	}
	return Event{}, false
}

func newModel(t *testing.T, cfg Config) (*Model, *recorder) {
	t.Helper()
	rec := &recorder{}
	m, err := New(cfg, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	return m, rec
}

// run steps m until nothing is scheduled.
func run(m *Model) {
	for at, ok := m.Next(); ok; at, ok = m.Next() {
		m.Advance(at)
	}
}

// vLLM's block rules, by hand: blocks of 16 tokens.
func TestBlockRules(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		run, prompt, want        int
		full, output, wantReserv int
	}{
		{"cold", 0, 64, 0, 4, 1, 1},
		{"full hit: the last block is computed", 4, 64, 48, 4, 16, 1},
		{"full hit with a partial tail: all 4 count", 4, 70, 64, 4, 10, 1},
		{"one-token prompt", 0, 1, 0, 0, 1, 1},
		{"partial tail and output spill into a second block", 2, 40, 32, 2, 20, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CachedTokens(tc.run, tc.prompt, 16); got != tc.want {
				t.Errorf("CachedTokens(%d, %d, 16) = %d, want %d", tc.run, tc.prompt, got, tc.want)
			}
			if got := ReserveBlocks(tc.prompt, tc.full, tc.output, 16); got != tc.wantReserv {
				t.Errorf("ReserveBlocks(%d, %d, %d, 16) = %d, want %d", tc.prompt, tc.full, tc.output, got, tc.wantReserv)
			}
		})
	}
}

// A hand-worked run at 1,000 prefill tokens/s, 100 decode tokens/s,
// blocks of 16, 100 blocks: A (64 tokens) cold at 0 prefills to 0.064
// and decodes 2 more tokens to 0.084; B (A's prompt) at 0.01 waits for
// A's prefill, finds 3 blocks (the last is recomputed): 16 tokens, first
// token at 0.08; C at 0.2, alone: its 4 blocks are A's and 16 more, so
// 64 cached and 16 prefilled.
func TestModel_HandWorked(t *testing.T) {
	m, rec := newModel(t, Config{BlockSize: 16, KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 100, EachToken: true})
	a := seq(1, 64)
	if err := m.Submit(1, Request{Blocks: a[:4], PromptTokens: 64, OutputTokens: 3}, 0); err != nil {
		t.Fatal(err)
	}
	m.Advance(0.01)
	if err := m.Submit(2, Request{Blocks: a[:4], PromptTokens: 64, OutputTokens: 1}, 0.01); err != nil {
		t.Fatal(err)
	}
	m.Advance(0.2)
	if err := m.Submit(3, Request{Blocks: seq(1, 5), PromptTokens: 80, OutputTokens: 1}, 0.2); err != nil {
		t.Fatal(err)
	}
	run(m)
	for _, tc := range []struct {
		kind   EventKind
		id     ID
		at     float64
		cached int
		tokens int
	}{
		{Started, 1, 0, 0, 0}, {FirstToken, 1, 0.064, 0, 1}, {Token, 1, 0.074, 0, 2}, {Done, 1, 0.084, 0, 3},
		{Started, 2, 0.064, 48, 0}, {FirstToken, 2, 0.08, 0, 1}, {Done, 2, 0.08, 0, 1},
		{Started, 3, 0.2, 64, 0}, {FirstToken, 3, 0.216, 0, 1},
	} {
		ev, ok := rec.find(tc.kind, tc.id)
		if !ok || !near(ev.At, tc.at) || ev.CachedTokens != tc.cached || ev.Tokens != tc.tokens {
			t.Errorf("request %d event %d: %+v (found %v), want at %v, %d cached, %d tokens", tc.id, tc.kind, ev, ok, tc.at, tc.cached, tc.tokens)
		}
	}
	if ev, _ := rec.find(Started, 2); !near(ev.FirstTokenAt, 0.08) || !near(ev.Prefill, 0.016) {
		t.Errorf("B started %+v, want first token at 0.08 after a 0.016 s prefill", ev)
	}
	if m.Running() != 0 || m.Waiting() != 0 || m.KVUsage() != 0 {
		t.Errorf("after the run: running %d waiting %d usage %v, want all 0", m.Running(), m.Waiting(), m.KVUsage())
	}
}

// The head of the queue waits for KV room, and the requests behind it
// too: on 8 blocks, A (4 blocks + 2 reserved for 32 output tokens) runs;
// B (3 + 1) needs 10 of 8 and waits for A's last token; C, small enough
// to fit, waits behind B (first come, first served).
func TestModel_HeadWaitsForRoom(t *testing.T) {
	m, rec := newModel(t, Config{BlockSize: 16, KVBlocks: 8, PrefillTPS: 1000, DecodeTPS: 1000})
	mustSubmit(t, m, 1, Request{Blocks: seq(1, 4), PromptTokens: 64, OutputTokens: 32}, 0)
	mustSubmit(t, m, 2, Request{Blocks: seq(100, 3), PromptTokens: 48, OutputTokens: 16}, 0.001)
	mustSubmit(t, m, 3, Request{Blocks: nil, PromptTokens: 8, OutputTokens: 1}, 0.002)
	if m.Waiting() != 2 || m.Running() != 1 || !near(m.KVUsage(), 6.0/8) {
		t.Fatalf("waiting %d running %d usage %v, want 2, 1, 6/8", m.Waiting(), m.Running(), m.KVUsage())
	}
	run(m)
	// A: prefill to 0.064, 31 more tokens at 1 ms: done at 0.095.
	for id, want := range map[ID]float64{1: 0, 2: 0.095, 3: 0.095 + 0.048} {
		if ev, _ := rec.find(Started, id); !near(ev.At, want) {
			t.Errorf("request %d started at %v, want %v", id, ev.At, want)
		}
	}
}

// Oversize requests are refused, or clipped to the leading blocks that
// fit; bad requests and a duplicate id are refused.
func TestModel_Refusals(t *testing.T) {
	m, _ := newModel(t, Config{BlockSize: 16, KVBlocks: 4})
	if err := m.Submit(1, Request{Blocks: seq(1, 4), PromptTokens: 64, OutputTokens: 1}, 0); !errors.Is(err, ErrTooLong) {
		t.Fatalf("4 blocks + 1 reserved on 4: %v, want ErrTooLong", err)
	}
	for _, r := range []Request{{PromptTokens: 0}, {Blocks: seq(1, 2), PromptTokens: 20}, {PromptTokens: 4, OutputTokens: -1}} {
		if err := m.Submit(2, r, 0); err == nil || errors.Is(err, ErrTooLong) {
			t.Errorf("%+v: %v, want a bad-request error", r, err)
		}
	}
	mustSubmit(t, m, 3, Request{PromptTokens: 4, OutputTokens: 2}, 0)
	if err := m.Submit(3, Request{PromptTokens: 4, OutputTokens: 2}, 0); err == nil {
		t.Error("a duplicate id was accepted")
	}
	c, rec := newModel(t, Config{BlockSize: 16, KVBlocks: 4, ClipOversize: true})
	mustSubmit(t, c, 1, Request{Blocks: seq(1, 6), PromptTokens: 100, OutputTokens: 10}, 0)
	// Reserve ceil((4 + 10) / 16) = 1: the leading 3 blocks fit.
	if ev, _ := rec.find(Started, 1); !slices.Equal(ev.Blocks, seq(1, 3)) || ev.Reserve != 1 {
		t.Fatalf("clipped start %+v, want blocks 1..3 and 1 reserved", ev)
	}
}

// Cancelling a prefill drops the blocks it stored but never computed; a
// waiting request leaves the queue; the next request starts at once.
func TestModel_Cancel(t *testing.T) {
	m, rec := newModel(t, Config{BlockSize: 16, KVBlocks: 64, PrefillTPS: 1000})
	mustSubmit(t, m, 1, Request{Blocks: seq(1, 4), PromptTokens: 64, OutputTokens: 4}, 0)
	mustSubmit(t, m, 2, Request{Blocks: seq(50, 2), PromptTokens: 32, OutputTokens: 4}, 0)
	mustSubmit(t, m, 3, Request{Blocks: seq(1, 4), PromptTokens: 64, OutputTokens: 1}, 0)
	if st, ok := m.Cancel(2, 0.01); !ok || st != StageWaiting {
		t.Fatalf("cancel 2: %v %v, want waiting", st, ok)
	}
	if st, ok := m.Cancel(1, 0.02); !ok || st != StagePrefill {
		t.Fatalf("cancel 1: %v %v, want prefill", st, ok)
	}
	if _, ok := m.Cancel(1, 0.02); ok {
		t.Fatal("cancelled 1 twice")
	}
	ev, ok := rec.find(Started, 3)
	if !ok || !near(ev.At, 0.02) || ev.CachedTokens != 0 || !slices.Equal(ev.Stored, []BlockRun{{Start: 0, End: 4}}) {
		t.Fatalf("3 started %+v (%v), want at 0.02 with nothing cached (1's blocks dropped)", ev, ok)
	}
	run(m)
	if _, ok := rec.find(FirstToken, 1); ok {
		t.Fatal("the cancelled prefill produced a token")
	}
}

// The bench's shortcut, stepping past later arrivals before submitting
// them (package doc), gives every request the start it gets when the
// model is stepped in time order, on random schedules that fill the
// cache.
func TestModel_LookaheadMatchesTimeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		type arrival struct {
			at float64
			r  Request
		}
		var sched []arrival
		at := 0.0
		for i := 0; i < 40; i++ {
			at += rng.ExpFloat64() * 0.05
			n, family := 1+rng.IntN(6), rng.IntN(3) // three shared prefixes
			blocks := make([]uint64, n)
			for k := range blocks {
				blocks[k] = uint64(family*100 + k)
			}
			sched = append(sched, arrival{at, Request{Blocks: blocks, PromptTokens: n*16 + rng.IntN(16), OutputTokens: rng.IntN(40)}})
		}
		cfg := Config{BlockSize: 16, KVBlocks: 12, PrefillTPS: 2000, DecodeTPS: 100}
		inOrder, recA := newModel(t, cfg)
		for i, a := range sched {
			inOrder.Advance(a.at)
			mustSubmit(t, inOrder, ID(i+1), a.r, a.at)
		}
		run(inOrder)
		ahead, recB := newModel(t, cfg)
		for i, a := range sched {
			mustSubmit(t, ahead, ID(i+1), a.r, a.at)
			for _, ok := recB.find(Started, ID(i+1)); !ok; _, ok = recB.find(Started, ID(i+1)) {
				next, more := ahead.Next()
				if !more {
					t.Fatalf("trial %d: request %d never started", trial, i+1)
				}
				ahead.Advance(next)
			}
		}
		for i := range sched {
			a, _ := recA.find(Started, ID(i+1))
			b, _ := recB.find(Started, ID(i+1))
			if !near(a.At, b.At) || a.CachedTokens != b.CachedTokens || !slices.Equal(a.Evicted, b.Evicted) {
				t.Fatalf("trial %d request %d: in order %+v, looking ahead %+v", trial, i+1, a, b)
			}
		}
	}
}

func mustSubmit(t *testing.T, m *Model, id ID, r Request, at float64) {
	t.Helper()
	if err := m.Submit(id, r, at); err != nil {
		t.Fatal(err)
	}
}

func seq(from, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(from + i)
	}
	return out
}
