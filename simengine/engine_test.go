package simengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/observe"
	"github.com/inference-cache/inference-cache/openai"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A repeated prefix is prefilled faster: at 1000 tokens/s (1 ms a token)
// a 64-token prompt (4 blocks of 16) takes 64 ms cold; the same prompt
// extended to 80 tokens finds its 4 blocks cached and prefills 16 tokens;
// the 64-token prompt again finds 4 blocks but vLLM recomputes the last
// one (the last token is always computed), so 48 tokens are cached. The
// usage reports the cached tokens, the engine's prefill histogram the
// times, its prefix-cache counters the tokens.
func TestRepeatedPrefix_PrefilledFasterTheSecondTime(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 100})
	wantCached := []int{0, 64, 48}
	for i, prompt := range [][]uint32{seq(1, 64), seq(1, 80), seq(1, 64)} {
		code, body := te.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 2})
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		var r openai.CompletionResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if r.Usage.PromptTokens != len(prompt) || r.Usage.CompletionTokens != 2 || r.Usage.CachedTokens() != wantCached[i] {
			t.Fatalf("request %d usage %+v (cached %d), want %d prompt, 2 completion, %d cached", i, r.Usage, r.Usage.CachedTokens(), len(prompt), wantCached[i])
		}
		if wantCached[i] == 0 && r.Usage.PromptTokensDetails != nil {
			t.Fatalf("request %d: prompt_tokens_details %+v, want null without cached tokens (as vLLM)", i, r.Usage.PromptTokensDetails)
		}
	}
	fams := te.scrape(t)
	// 64 + 16 + 16 uncached tokens at 1 ms each; no queue wait, so TTFT
	// equals the prefill.
	for _, name := range []string{"vllm:request_prefill_time_seconds", "vllm:time_to_first_token_seconds"} {
		if got := metric(fams, name); !near(got, 0.096) {
			t.Errorf("%s sum %v, want 0.096", name, got)
		}
	}
	if q, h := metric(fams, "vllm:prefix_cache_queries_total"), metric(fams, "vllm:prefix_cache_hits_total"); q != 208 || h != 112 {
		t.Errorf("prefix cache queries %v hits %v, want 208 and 112", q, h)
	}
	if p, g := metric(fams, "vllm:prompt_tokens_total"), metric(fams, "vllm:generation_tokens_total"); p != 208 || g != 6 {
		t.Errorf("prompt tokens %v generation tokens %v, want 208 and 6", p, g)
	}
	if s := metric(fams, "vllm:request_success_total", "finished_reason", "length"); s != 3 {
		t.Errorf("request_success{length} %v, want 3", s)
	}
}

// batch decodes one published batch with observe's decoder (the one the
// subscriber uses).
func batch(t *testing.T, payload []byte) observe.Batch {
	t.Helper()
	b, err := observe.DecodeBatch(payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Eviction emits BlockRemoved, hand-worked on 6 blocks of 16 (each
// request reserves one block for its output): A (4 blocks) is stored
// whole; B (3 new blocks) leaves room for 5, so A's two last blocks go,
// tail first; A again finds its first 2 blocks, stores its last 2 chained
// to its block 1, and evicts B's two last blocks.
func TestEviction_EmitsBlockRemovedTailFirst(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 6, PrefillTPS: 1000, DecodeTPS: 100})
	run := func(prompt []uint32) {
		t.Helper()
		if code, body := te.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 1}); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	a, b := seq(1, 64), seq(1000, 48)
	run(a)
	run(b)
	run(a)
	bs := te.published(t, 5)
	if len(bs) != 5 {
		t.Fatalf("%d batches, want 5 (A stored; B removed, stored; A removed, stored)", len(bs))
	}
	aStored, bRemoved, bStored, a2Removed, a2Stored := batch(t, bs[0]), batch(t, bs[1]), batch(t, bs[2]), batch(t, bs[3]), batch(t, bs[4])
	ev := aStored.Events[0]
	if ev.Kind != observe.EventBlockStored || ev.HasParent || ev.BlockSize != 16 || !slices.Equal(ev.TokenIDs, a) || len(ev.BlockHashes) != 4 || ev.Medium != "GPU" {
		t.Fatalf("A stored %+v", ev)
	}
	ah := ev.BlockHashes
	if ev := bRemoved.Events[0]; ev.Kind != observe.EventBlockRemoved || !slices.Equal(ev.BlockHashes, []uint64{ah[3], ah[2]}) {
		t.Fatalf("B's admission removed %+v, want A's blocks 3 and 2 %x", ev, ah[2:])
	}
	ev = bStored.Events[0]
	if ev.Kind != observe.EventBlockStored || ev.HasParent || !slices.Equal(ev.TokenIDs, b) || len(ev.BlockHashes) != 3 {
		t.Fatalf("B stored %+v", ev)
	}
	bh := ev.BlockHashes
	if ev := a2Removed.Events[0]; ev.Kind != observe.EventBlockRemoved || !slices.Equal(ev.BlockHashes, []uint64{bh[2], bh[1]}) {
		t.Fatalf("A's second admission removed %+v, want B's blocks 2 and 1", ev)
	}
	ev = a2Stored.Events[0]
	if ev.Kind != observe.EventBlockStored || !ev.HasParent || ev.Parent != ah[1] || !slices.Equal(ev.TokenIDs, a[32:]) || !slices.Equal(ev.BlockHashes, ah[2:]) {
		t.Fatalf("A's second store %+v, want blocks 2-3 (same hashes) chained to block 1", ev)
	}
}

// The head of the queue waits for KV room: on 8 blocks, A (4 blocks and 2
// reserved for 32 output tokens) leaves too little room for B (3 blocks
// and 1 reserved), so B waits, with no prefill running, until A's last
// token; then it runs.
func TestKVCapacity_HeadWaitsForRoom(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 8, PrefillTPS: 1000, DecodeTPS: 1000})
	ctx := context.Background()
	ha, err := te.Submit(ctx, seq(1, 64), 32, "")
	if err != nil {
		t.Fatal(err)
	}
	te.clock.Step() // A's prefill
	hb, err := te.Submit(ctx, seq(500, 48), 16, "")
	if err != nil {
		t.Fatal(err)
	}
	fams := te.scrape(t)
	if w, r := metric(fams, "vllm:num_requests_waiting"), metric(fams, "vllm:num_requests_running"); w != 1 || r != 1 {
		t.Fatalf("waiting %v running %v, want B waiting, A running", w, r)
	}
	if u := metric(fams, "vllm:kv_cache_usage_perc"); !near(u, 6.0/8) {
		t.Fatalf("kv usage %v, want 6/8 (A's 4 blocks + 2 reserved)", u)
	}
	for !ha.Progress().Done {
		if hb.Progress().Tokens > 0 || te.pending() != 1 {
			t.Fatalf("B started (%+v) or more than A's decode pending (%d) before A finished", hb.Progress(), te.pending())
		}
		te.clock.Step()
	}
	for !hb.Progress().Done {
		if !te.clock.Step() {
			t.Fatal("B never ran after A finished")
		}
	}
	if p := hb.Progress(); p.Tokens != 16 || p.Cancelled {
		t.Fatalf("B %+v", p)
	}
}

func (te *testEngine) pending() int { return te.clock.pending() }

// Cancelling a prefill stops it and drops the blocks it stored but never
// computed: nothing is announced, and the same prompt afterwards finds
// nothing cached. Cancelling a waiting request takes it out of the queue.
// Both are counted by stage.
func TestCancel_StopsTheRequestWhereItIs(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 64, PrefillTPS: 1000, DecodeTPS: 100})
	ctxA, cancelA := context.WithCancel(context.Background())
	ha, err := te.Submit(ctxA, seq(1, 64), 4, "")
	if err != nil {
		t.Fatal(err)
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	hb, err := te.Submit(ctxB, seq(700, 32), 4, "")
	if err != nil {
		t.Fatal(err)
	}
	cancelB()
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		return hb.Progress().Cancelled, fmt.Sprintf("B not cancelled: %+v", hb.Progress())
	})
	cancelA()
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		return ha.Progress().Cancelled, fmt.Sprintf("A not cancelled: %+v", ha.Progress())
	})
	if n := te.pending(); n != 0 {
		t.Fatalf("%d timers pending after both cancellations, want 0", n)
	}
	if n := len(te.pub.all()); n != 0 {
		t.Fatalf("%d event batches published, want none (the cancelled prefill stored nothing it computed)", n)
	}
	fams := te.scrape(t)
	for _, st := range []string{StageWaiting, StagePrefill} {
		if c := metric(fams, CancelledMetric, "stage", st); c != 1 {
			t.Errorf("cancelled{stage=%s} %v, want 1", st, c)
		}
	}
	if w, r, u := metric(fams, "vllm:num_requests_waiting"), metric(fams, "vllm:num_requests_running"), metric(fams, "vllm:kv_cache_usage_perc"); w != 0 || r != 0 || u != 0 {
		t.Fatalf("after cancellation waiting %v running %v kv usage %v, want 0 0 0", w, r, u)
	}
	hc, err := te.Submit(context.Background(), seq(1, 64), 1, "")
	if err != nil {
		t.Fatal(err)
	}
	for !hc.Progress().Done {
		te.clock.Step()
	}
	if p := hc.Progress(); p.CachedTokens != 0 || p.Prefill != 64*time.Millisecond {
		t.Fatalf("the same prompt after the cancelled prefill: %+v, want nothing cached and a 64 ms prefill", p)
	}
}

// A request that cannot fit the KV cache at all is refused at once, and
// a salted prompt shares no blocks with the same prompt unsalted.
func TestSubmit_TooLongAndSalt(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 8, PrefillTPS: 1000, DecodeTPS: 1000})
	if _, err := te.Submit(context.Background(), seq(1, 120), 9, ""); !errors.Is(err, ErrTooLong) {
		t.Fatalf("129 tokens on 8 blocks of 16: %v, want ErrTooLong", err)
	}
	run := func(salt string) Progress {
		h, err := te.Submit(context.Background(), seq(1, 40), 1, salt)
		if err != nil {
			t.Fatal(err)
		}
		for !h.Progress().Done {
			te.clock.Step()
		}
		return h.Progress()
	}
	run("")
	if p := run("tenant-a"); p.CachedTokens != 0 {
		t.Fatalf("salted prompt found %d tokens of the unsalted one cached", p.CachedTokens)
	}
	if p := run(""); p.CachedTokens != 32 {
		t.Fatalf("unsalted prompt again: %d cached, want 32", p.CachedTokens)
	}
}
