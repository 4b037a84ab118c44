package bench

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/simengine"
)

// oneEngineSchedule is one engine's requests, hand-worked at 512-token
// blocks, prefill 2560 tokens/s (0.2 s a block), decode 10 tokens/s
// (0.1 s a token) and 8 blocks of KV:
//
//   - R1 at 0: 3 blocks cold: TTFT 0.6; done 0.9 (3 more tokens).
//   - R2 at 0.2: R1's prompt. Waits for R1's prefill (to 0.6); all 3
//     blocks cached, but the last prompt token is always computed, so the
//     last block is prefilled (0.2 s): TTFT 0.6.
//   - R3 at 1.0: blocks 1, 2 cached of 4 full + 100 tokens: 1124 tokens to
//     prefill, 0.4390625 s; done at 1.5390625.
//   - R4 at 1.1: 4 new blocks + 1 reserved; R3 pins 4 + 1 reserved: 10 of
//     8 blocks, so it waits for R3's end (1.5390625), then prefills 0.8 s:
//     TTFT 1.2390625; done 0.9 s after its first token, at 3.2390625. Its
//     admission evicts the least recent blocks, 3 then 5.
//   - R5 at 1.6: R3's prompt; 1, 2, 4 cached (5 evicted): 612 tokens,
//     0.2390625 s, but beside R4's 4 pinned + 1 reserved it needs 4 + 1:
//     it waits for R4's end: TTFT 3.2390625 + 0.2390625 − 1.6 = 1.878125.
var oneEngineSchedule = []struct {
	at         float64
	q          Request
	ttft       float64
	cachedToks int
}{
	{0, Request{InputLength: 1536, OutputLength: 4, HashIDs: []uint64{1, 2, 3}}, 0.6, 0},
	{0.2, Request{InputLength: 1536, OutputLength: 2, HashIDs: []uint64{1, 2, 3}}, 0.6, 1024},
	{1.0, Request{InputLength: 2148, OutputLength: 2, HashIDs: []uint64{1, 2, 4, 5, 10}}, 0.4390625, 1024},
	{1.1, Request{InputLength: 2048, OutputLength: 10, HashIDs: []uint64{6, 7, 8, 9}}, 1.2390625, 0},
	{1.6, Request{InputLength: 2148, OutputLength: 1, HashIDs: []uint64{1, 2, 4, 5, 10}}, 1.878125, 1536},
}

const (
	crossPrefillTPS = 2560
	crossDecodeTPS  = 10
	crossKVBlocks   = 8
)

// The bench's engines run the hand-worked schedule to the millisecond.
func TestEngine_OneEngineScheduleHandWorked(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: crossKVBlocks, PrefillTPS: crossPrefillTPS, DecodeTPS: crossDecodeTPS})
	for i, r := range oneEngineSchedule {
		s := e.Serve(&r.q, r.at)
		if s.CachedTokens != r.cachedToks || !near(s.TTFTS, r.ttft) {
			t.Errorf("R%d: served %+v, want %d cached and TTFT %v", i+1, s, r.cachedToks, r.ttft)
		}
	}
}

// What is measured is what ships: the same schedule through a real-time
// sim engine (the engine model on the wall clock, prompts synthesised
// from the hash ids as the bench publishes them, 512-token blocks) gives
// each request the bench's cached tokens exactly and its TTFT within
// crossTolerance of wall-clock scheduling jitter (timers, goroutine
// wake-ups, a late submission); every hand-worked TTFT differs from what
// a rule left out would give by at least 0.1 s.
func TestEngine_SameTTFTAsTheRealTimeSimEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs about 3.5 s of wall-clock time")
	}
	const crossTolerance = 0.05 // seconds
	bench := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: crossKVBlocks, PrefillTPS: crossPrefillTPS, DecodeTPS: crossDecodeTPS})
	want := make([]Served, len(oneEngineSchedule))
	for i, r := range oneEngineSchedule {
		want[i] = bench.Serve(&r.q, r.at)
	}
	sim, err := simengine.New(simengine.Config{Model: "m", BlockSize: TraceBlockTokens, KVBlocks: crossKVBlocks,
		PrefillTPS: crossPrefillTPS, DecodeTPS: crossDecodeTPS, HashSeed: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	type result struct {
		ttft   float64
		cached int
		err    error
	}
	got := make([]result, len(oneEngineSchedule))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	origin := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range oneEngineSchedule {
		r := &oneEngineSchedule[i]
		prompt := AppendPromptTokens(nil, &r.q)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(origin.Add(time.Duration(r.at * float64(time.Second))))) // the request's arrival
			sent := time.Now()
			h, err := sim.Submit(ctx, prompt, r.q.OutputLength, "")
			if err != nil {
				got[i].err = err
				return
			}
			p, err := h.Next(ctx, 0)
			got[i] = result{ttft: time.Since(sent).Seconds(), cached: p.CachedTokens, err: err}
		}()
	}
	wg.Wait()
	for i, g := range got {
		if g.err != nil {
			t.Fatalf("R%d: %v", i+1, g.err)
		}
		if g.cached != want[i].CachedTokens || math.Abs(g.ttft-want[i].TTFTS) > crossTolerance {
			t.Errorf("R%d: sim engine %d cached, TTFT %.4f s; bench %d cached, TTFT %.4f s (tolerance %v s)",
				i+1, g.cached, g.ttft, want[i].CachedTokens, want[i].TTFTS, crossTolerance)
		}
	}
}
