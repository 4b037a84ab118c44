package bench

import (
	"context"
	"slices"
	"testing"
	"time"
)

// released returns the events engine e releases under visible, oldest
// first (copies: Release reuses its queue).
func released(e *Engine, visible func(at float64) bool) []KVEvent {
	var out []KVEvent
	e.Release(visible, func(ev *KVEvent) {
		out = append(out, KVEvent{At: ev.At, Blocks: slices.Clone(ev.Blocks),
			Adm: Admission{Evicted: slices.Clone(ev.Adm.Evicted), Stored: slices.Clone(ev.Adm.Stored)}})
	})
	return out
}

func all(float64) bool { return true }

// The visibility rules of Config.visible: with the delay rule a lookup at
// t sees the events published before t − EventDelay.
func TestConfigVisible_Rules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		at, t float64
		want  bool
	}{
		{"delay: 40 ms after publication, not yet", Config{Visibility: VisibilityDelay, EventDelay: 50 * time.Millisecond}, 1.0, 1.04, false},
		{"delay: 60 ms after publication, visible", Config{Visibility: VisibilityDelay, EventDelay: 50 * time.Millisecond}, 1.0, 1.06, true},
		{"delay: published later than the lookup", Config{Visibility: VisibilityDelay, EventDelay: 50 * time.Millisecond}, 2.0, 1.06, false},
		{"timestamp: same instant is concurrent", Config{Visibility: VisibilityTimestamp}, 1.0, 1.0, false},
		{"timestamp: any earlier instant", Config{Visibility: VisibilityTimestamp}, 1.0, 1.001, true},
		{"request: every earlier request", Config{Visibility: VisibilityRequest}, 5.0, 1.0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.visible(tc.t)(tc.at); got != tc.want {
				t.Fatalf("event at %v, lookup at %v: visible %v, want %v", tc.at, tc.t, got, tc.want)
			}
		})
	}
}

// A request's KV event is stamped with its prefill's end and released by
// Engine.Release only once the delay rule makes it visible, oldest first.
func TestEngineRelease_EventAtPrefillEndVisibleAfterTheDelay(t *testing.T) {
	cfg := &Config{Visibility: VisibilityDelay, EventDelay: 50 * time.Millisecond}
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1024, DecodeTPS: 100})
	// Two 1024-token requests at 0: prefills [0, 1] and [1, 2].
	e.Serve(req(1024, 1, 2), 0)
	e.Serve(req(1024, 3, 4), 0)
	if got := released(e, cfg.visible(1.04)); len(got) != 0 || e.PendingEvents() != 2 {
		t.Fatalf("at 1.04 s released %+v, %d pending; want nothing (1.0 is not before 1.04 − 0.05)", got, e.PendingEvents())
	}
	got := released(e, cfg.visible(1.06))
	want := KVEvent{At: 1.0, Blocks: []uint64{1, 2}, Adm: Admission{Stored: []BlockRun{{Start: 0, End: 2}}}}
	if len(got) != 1 || !sameEvent(got[0], want) || e.PendingEvents() != 1 {
		t.Fatalf("at 1.06 s released %+v, %d pending; want only %+v", got, e.PendingEvents(), want)
	}
	got = released(e, cfg.visible(2.06))
	want = KVEvent{At: 2.0, Blocks: []uint64{3, 4}, Adm: Admission{Stored: []BlockRun{{Start: 0, End: 2}}}}
	if len(got) != 1 || !sameEvent(got[0], want) || e.PendingEvents() != 0 {
		t.Fatalf("at 2.06 s released %+v, %d pending; want only %+v", got, e.PendingEvents(), want)
	}
}

// With EventsAtArrival (the timestamp and request rules) the event is
// stamped with the arrival.
func TestEngineRelease_EventsAtArrival(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1024, DecodeTPS: 100, EventsAtArrival: true})
	e.Serve(req(1024, 1, 2), 0.25)
	if got := released(e, all); len(got) != 1 || got[0].At != 0.25 {
		t.Fatalf("released %+v, want one event at 0.25", got)
	}
}

func sameEvent(a, b KVEvent) bool {
	return near(a.At, b.At) && slices.Equal(a.Blocks, b.Blocks) && slices.Equal(a.Adm.Stored, b.Adm.Stored) &&
		slices.Equal(a.Adm.Evicted, b.Adm.Evicted)
}

// The engine's own cache holds a request's blocks from its admission (a
// later prefill on that engine starts after it, FIFO), but the perfect
// indexer that dynamo reads holds them only once the event is released:
// until then it credits none (and llm-d, which reads no events, credits
// only what it routed itself: nothing yet).
func TestIndexerView_CreditsOnlyReleasedEvents(t *testing.T) {
	cfg := FleetConfig{Engines: 2, CacheBlocks: 100, PrefillTPS: 1000, DecodeTPS: 100}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	run := &Config{Visibility: VisibilityDelay, EventDelay: 50 * time.Millisecond}
	f := NewFleet(cfg, "m", "")
	view := NewIndexerView(2)
	step := func(t float64) {
		for k, e := range f.Engines {
			e.Release(run.visible(t), func(ev *KVEvent) { view.Apply(k, ev) })
		}
	}
	// A: 1536 tokens on engine 0 at 0, prefill [0, 1.536]: its event is
	// visible from 1.586.
	f.Engines[0].Serve(req(1536, 1, 2, 3), 0)
	q := req(1536, 1, 2, 3)
	ctx := context.Background()
	dyn := newDynamo(2, view, 1)
	llm := newLLMD(f, 1)

	step(0.5)
	for _, e := range f.Engines {
		e.Scrape(0.5)
	}
	if run, own := view.CachedRun(0, q.Blocks()), f.Engines[0].Cache.CachedRun(q.Blocks()); run != 0 || own != 3 {
		t.Fatalf("at 0.5 s the indexer holds %d blocks, the engine %d; want 0 and 3", run, own)
	}
	// Dynamo: 1536/512 = 3 prefill blocks + 3 new blocks on both, no
	// credit.
	if dyn.Route(ctx, 0, q, 0.5); dyn.logits[0] != 6 || dyn.logits[1] != 6 {
		t.Fatalf("dynamo logits %v at 0.5 s, want [6 6]", dyn.logits)
	}
	// llm-d: prefix 0 on both; queues equal (1); engine 0 runs A (3
	// blocks of 100): 2 + 2·0.97 against 2 + 2·1.
	llm.Route(ctx, 0, q, 0.5)
	if s0, s1 := llm.score[0], llm.score[1]; !closeTo(s0, 2+2*(1-0.03)) || !closeTo(s1, 4) {
		t.Fatalf("llm-d scores %v, %v at 0.5 s, want %v, 4 (no prefix credit)", s0, s1, 2+2*(1-0.03))
	}
	// The engine itself credits them: q waits for A's prefill (to 1.536)
	// and finds all 3 blocks cached, but computes its last one (the last
	// token always is): 1024 cached, 512 tokens in 0.512 s.
	if s := f.Engines[0].Serve(q, 0.5); s.CachedTokens != 1024 || !near(s.TTFTS, 1.548) {
		t.Fatalf("engine 0 served q with %+v, want 1024 cached and TTFT 1.548 (the wait + 0.512)", s)
	}

	step(1.6)
	if run := view.CachedRun(0, q.Blocks()); run != 3 {
		t.Fatalf("at 1.6 s the indexer holds %d blocks of engine 0, want 3", run)
	}
	// Dynamo: 0 prefill blocks + 3 on engine 0, 3 + 3 on engine 1.
	if dyn.Route(ctx, 1, q, 1.6); dyn.logits[0] != 3 || dyn.logits[1] != 6 {
		t.Fatalf("dynamo logits %v at 1.6 s, want [3 6]", dyn.logits)
	}
}

// The TTFT model on a hand-worked sequence: prefill 1000 tokens/s, decode
// 100 tokens/s, one prefill at a time, FIFO.
func TestEngineServe_QueueingHandWorked(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1000, DecodeTPS: 100})
	for _, tc := range []struct {
		name string
		q    *Request
		at   float64
		want Served
	}{
		// Cold, idle: prefill 2048 tokens in [0, 2.048], the first of 200
		// output tokens out of it, the other 199 in 1.99 s after.
		{"A: cold on an idle engine", &Request{InputLength: 2048, OutputLength: 200, HashIDs: ids(1, 4)}, 0,
			Served{CachedTokens: 0, WaitS: 0, TTFTS: 2.048, FirstTokenAt: 2.048, DoneAt: 4.038}},
		// Waits for A's prefill (1.048 s), finds A's 4 blocks, prefills
		// 512 tokens in [2.048, 2.56], then 49 more tokens in 0.49 s: it
		// ends before A.
		{"B: queued behind A, its prefix cached", &Request{InputLength: 2560, OutputLength: 50, HashIDs: ids(1, 5)}, 1,
			Served{CachedTokens: 2048, WaitS: 1.048, TTFTS: 1.56, FirstTokenAt: 2.56, DoneAt: 3.05}},
		// The engine idles from 2.56: no wait; 1000 tokens, one full block
		// (block 1) cached: 488 tokens in 0.488 s, no output.
		{"C: after the queue drained", &Request{InputLength: 1000, OutputLength: 0, HashIDs: []uint64{1, 99}}, 5,
			Served{CachedTokens: 512, WaitS: 0, TTFTS: 0.488, FirstTokenAt: 5.488, DoneAt: 5.488}},
	} {
		got := e.Serve(tc.q, tc.at)
		if got.CachedTokens != tc.want.CachedTokens || !near(got.WaitS, tc.want.WaitS) || !near(got.TTFTS, tc.want.TTFTS) ||
			!near(got.FirstTokenAt, tc.want.FirstTokenAt) || !near(got.DoneAt, tc.want.DoneAt) {
			t.Fatalf("%s: served %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The cache shares its capacity with running requests: pinned blocks are
// never evicted, reserved output blocks take room, only the leading
// blocks that fit are stored, and unpinned blocks are evictable again.
func TestCache_AdmitPinnedSharesCapacityWithRunningRequests(t *testing.T) {
	c := NewCache(6)
	for _, tc := range []struct {
		name    string
		unpin   []uint64 // released before the admission
		blocks  []uint64
		reserve int
		held    int
		stored  []BlockRun
		evicted []uint64
		keys    []uint64 // most recent first, afterwards
	}{
		// Room 6 − 1 = 5: all three stored and pinned.
		{"room for all", nil, []uint64{1, 2, 3}, 1, 3, []BlockRun{{Start: 0, End: 3}}, nil, []uint64{1, 2, 3}},
		// Room 6 − 2 = 4, 3 pinned: only block 4 fits; 1, 2, 3 stay.
		{"pinned blocks leave room for one", nil, []uint64{4, 5, 6, 7}, 2, 1, []BlockRun{{Start: 0, End: 1}}, nil, []uint64{4, 1, 2, 3}},
		// 1, 2, 3 released. Room 6 − 3 = 3: 3, 2, 1 evicted (least recent
		// first), 4 pinned stays, so two of the three fit.
		{"pinned block passed over", []uint64{1, 2, 3}, []uint64{8, 9, 10}, 3, 2, []BlockRun{{Start: 0, End: 2}}, []uint64{3, 2, 1}, []uint64{8, 9, 4}},
		// 4 released: the least recent block, now evictable (8 and 9
		// stay pinned).
		{"released block evicted", []uint64{4}, []uint64{11}, 3, 1, []BlockRun{{Start: 0, End: 1}}, []uint64{4}, []uint64{11, 8, 9}},
	} {
		c.Unpin(tc.unpin)
		var a Admission
		held := c.AdmitPinned(tc.blocks, &a, tc.reserve)
		if held != tc.held || !slices.Equal(a.Stored, tc.stored) || !slices.Equal(a.Evicted, tc.evicted) || !slices.Equal(c.Keys(), tc.keys) {
			t.Fatalf("%s: held %d, stored %v, evicted %v, keys %v; want %d, %v, %v, %v",
				tc.name, held, a.Stored, a.Evicted, c.Keys(), tc.held, tc.stored, tc.evicted, tc.keys)
		}
		for _, h := range tc.blocks[:held] {
			if c.Pinned(h) != 1 {
				t.Fatalf("%s: block %d has %d pins, want 1", tc.name, h, c.Pinned(h))
			}
		}
	}
}

// The engine pins a running request's blocks and reserves its output
// blocks until its last token: a request that does not fit beside a
// running one waits for it to end (vLLM's FCFS scheduler), and the ended
// request's blocks are then evictable, least recent first.
func TestEngine_RunningRequestsHoldTheirBlocksUntilDone(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 6, PrefillTPS: 1000, DecodeTPS: 10})
	// A: 3 blocks, 10 output tokens (1 reserved block): prefill [0, 1.536],
	// 9 more tokens at 0.1 s: done 2.436.
	a := e.Serve(&Request{InputLength: 1536, OutputLength: 10, HashIDs: []uint64{1, 2, 3}}, 0)
	if !near(a.DoneAt, 2.436) {
		t.Fatalf("A done at %v, want 2.436", a.DoneAt)
	}
	// B: 4 blocks and 1 reserved at 1. Beside A's 3 pinned and 1 reserved
	// it needs 3 + 1 + 4 + 1 = 9 of 6 blocks: it waits for A's end (2.436),
	// evicts A's blocks 3 and 2 (tail first) and prefills 2048 tokens.
	b := e.Serve(&Request{InputLength: 2048, OutputLength: 10, HashIDs: []uint64{4, 5, 6, 7}}, 1)
	if b.CachedTokens != 0 || !near(b.WaitS, 1.436) || !near(b.FirstTokenAt, 4.484) || !near(b.DoneAt, 5.384) {
		t.Fatalf("B %+v, want 0 cached, wait 1.436, first token 4.484, done 5.384", b)
	}
	if got := e.Cache.Keys(); !slices.Equal(got, []uint64{4, 5, 6, 7, 1}) {
		t.Fatalf("cache %v after B, want [4 5 6 7 1]", got)
	}
	evs := released(e, all)
	if len(evs) != 2 || !slices.Equal(evs[1].Adm.Evicted, []uint64{3, 2}) || !slices.Equal(evs[1].Adm.Stored, []BlockRun{{Start: 0, End: 4}}) {
		t.Fatalf("events %+v, want B's to evict 3 and 2 and store its 4 blocks", evs)
	}
	// C at 6, after both ended: block 1 cached (512 tokens), 1024 to
	// prefill. 5 cached + 2 missing in 6: one goes, the least recent not
	// C's own (1 is C's): 7.
	c := e.Serve(&Request{InputLength: 1536, OutputLength: 0, HashIDs: []uint64{1, 8, 9}}, 6)
	if c.CachedTokens != 512 || !near(c.TTFTS, 1.024) {
		t.Fatalf("C %+v, want 512 cached, TTFT 1.024", c)
	}
	evs = released(e, all)
	if len(evs) != 1 || !slices.Equal(evs[0].Adm.Evicted, []uint64{7}) || !slices.Equal(evs[0].Adm.Stored, []BlockRun{{Start: 1, End: 3}}) {
		t.Fatalf("C's events %+v, want block 7 evicted and [1,3) stored", evs)
	}
}

// Engine.Scrape at a tick: waiting = admitted, prefill not started;
// running = prefill started, last token not reached; KV usage = the
// running requests' pinned prompt blocks and output blocks / capacity.
func TestEngineScrape_HandWorked(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1000, DecodeTPS: 100})
	// A at 0: 2 blocks, 100 output tokens (1 block): prefill [0, 1.024],
	// decode to 2.014; holds 3 blocks.
	e.Serve(&Request{InputLength: 1024, OutputLength: 100, HashIDs: []uint64{1, 2}}, 0)
	// B at 0.5: 3 other blocks: prefill [1.024, 2.56], decode to 3.55;
	// holds 4.
	e.Serve(&Request{InputLength: 1536, OutputLength: 100, HashIDs: []uint64{3, 4, 5}}, 0.5)
	// C at 0.6: 1 block, no output: prefill [2.56, 3.072]; holds 1.
	e.Serve(&Request{InputLength: 512, OutputLength: 0, HashIDs: []uint64{9}}, 0.6)
	for _, tc := range []struct {
		at               float64
		waiting, running int
		usage            float64
	}{
		{0.7, 2, 1, 0.3}, // A prefills; B, C wait
		{1.5, 1, 2, 0.7}, // A decodes, B prefills; C waits
		{2.1, 1, 1, 0.4}, // A done
		{2.6, 0, 2, 0.5}, // B decodes, C prefills
		{3.1, 0, 1, 0.4}, // C done
		{4.0, 0, 0, 0},   // all done
	} {
		e.Scrape(tc.at)
		m := e.Metrics()
		if m.At != tc.at || m.Waiting != tc.waiting || m.Running != tc.running || !near(m.KVUsage, tc.usage) {
			t.Fatalf("scrape at %v: %+v, want waiting %d, running %d, usage %v", tc.at, m, tc.waiting, tc.running, tc.usage)
		}
		if m.QueryTokens != 1024+1536+512 || m.HitTokens != 0 {
			t.Fatalf("scrape at %v: counters %d, %d; want 3072 queried, 0 hit", tc.at, m.QueryTokens, m.HitTokens)
		}
	}
}

// Found while writing these tests: when the pinned blocks alone exceed
// Capacity − reserve, admit computes a negative room, its "room == 0"
// cut never triggers, and every block is stored beyond the capacity.
func TestCache_AdmitPinnedNeverExceedsCapacity(t *testing.T) {
	c := NewCache(4)
	var a Admission
	c.AdmitPinned([]uint64{1, 2, 3}, &a, 1)
	// Room 4 − 2 = 2, with 3 blocks pinned: nothing fits.
	if held := c.AdmitPinned([]uint64{4, 5}, &a, 2); held != 0 || c.Len() > c.Capacity() || len(a.Stored) != 0 {
		t.Fatalf("held %d, stored %v, %d blocks in a cache of %d; want nothing stored", held, a.Stored, c.Len(), c.Capacity())
	}
}

// Found while writing these tests: a prompt block shared by two running
// requests occupies one slot of the cache (AdmitPinned counts it once),
// but Scrape adds it to the KV usage once per request.
func TestEngineScrape_CountsSharedBlocksOnce(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1000, DecodeTPS: 100})
	e.Serve(&Request{InputLength: 1024, OutputLength: 100, HashIDs: []uint64{1, 2}}, 0)
	e.Serve(&Request{InputLength: 1536, OutputLength: 100, HashIDs: []uint64{1, 2, 3}}, 0.5)
	// At 1.2 both run: blocks 1, 2, 3 and one output block each: 5 of 10.
	e.Scrape(1.2)
	if u := e.Metrics().KVUsage; !near(u, 0.5) {
		t.Fatalf("usage %v, want 0.5", u)
	}
}
