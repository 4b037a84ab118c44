package observe

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// The engine of these tests: block size 4, replica "vllm-0".
const (
	tReplica = "vllm-0"
	tTS      = 1700000000.5 // batch ts → observed_at_ms 1700000000500
	tMs      = 1700000000500
)

var tNow = time.Unix(1700000100, 0)

type harness struct {
	t   *testing.T
	m   *Metrics
	s   *sequencer
	cfg *EngineConfig
}

func newHarness(t *testing.T, replay bool, mod ...func(*EngineConfig)) *harness {
	t.Helper()
	c := &Config{Engines: []EngineConfig{{Endpoint: "tcp://127.0.0.1:5557", ReplicaID: tReplica, ModelID: "m", TenantID: "t", HashScheme: "vllm", BlockSize: 4}}}
	for _, f := range mod {
		f(&c.Engines[0])
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	em := m.forEngine(tReplica)
	tr := newTranslator(&c.Engines[0], 0, em, log)
	return &harness{t: t, m: m, cfg: &c.Engines[0], s: newSequencer(tr, em, log, replay)}
}

// live feeds a live batch and returns what it emitted.
func (h *harness) live(seq int64, payload []byte) ([]*pb.BlockEvent, *replayRequest) {
	return h.s.live(nil, seq, payload, tNow)
}

func (h *harness) liveNoReplay(seq int64, payload []byte) []*pb.BlockEvent {
	h.t.Helper()
	out, req := h.live(seq, payload)
	if req != nil {
		h.t.Fatalf("seq %d: unexpected replay request %+v", seq, req)
	}
	return out
}

// fps is contract §3.2 spelled out: the chained hashes of the blocks of tokens
// from block index `from` on, given the whole prompt so far.
func fps(t *testing.T, prompt []uint32, from int) []uint64 {
	t.Helper()
	k, err := fingerprint.Compute(prompt, 4)
	if err != nil {
		t.Fatal(err)
	}
	return k.BlockHashes[from:]
}

func fours(n int) []uint32 {
	c := make([]uint32, n)
	for i := range c {
		c[i] = 4
	}
	return c
}

func stored(replica, adapter string, hashes []uint64, before uint32) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: replica, HashScheme: "vllm", ModelId: "m", TenantId: "t",
		AdapterId: adapter, BlockHashes: hashes, BlockTokenCounts: fours(len(hashes)), PrefixTokensBefore: before, ObservedAtMs: tMs}
}

func removed(replica, adapter string, hashes ...uint64) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_REMOVED, ReplicaId: replica, HashScheme: "vllm", ModelId: "m", TenantId: "t",
		AdapterId: adapter, BlockHashes: hashes, BlockTokenCounts: fours(len(hashes)), ObservedAtMs: tMs}
}

func cleared(replica string, atMs int64) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_CLEARED, ReplicaId: replica, HashScheme: "vllm", ModelId: "m", TenantId: "t", ObservedAtMs: atMs}
}

func wantEvents(t *testing.T, got []*pb.BlockEvent, want ...*pb.BlockEvent) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("emitted events (-want +got):\n%s", d)
	}
}

func TestTranslate_StoreChainsFromParentFingerprint(t *testing.T) {
	h := newHarness(t, false)
	prompt := ot.Tokens(100, 12)
	// First batch: the subscriber starts by clearing its replica, then the
	// two-block store without parent.
	out := h.liveNoReplay(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(900, 901), nil, prompt[:8], 4, nil, "GPU", nil)))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()), stored(tReplica, "", fps(t, prompt[:8], 0), 0))
	// Second batch: one block chained from engine hash 901; its key must be
	// what a gateway computes for block 2 of the whole 12-token prompt, and
	// 8 tokens precede it.
	out = h.liveNoReplay(1, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(902), uint64(901), prompt[8:], 4, nil, "GPU", nil)))
	wantEvents(t, out, stored(tReplica, "", fps(t, prompt, 2), 8))
	// Removing engine hashes 901 and 902 removes their fingerprints.
	out = h.liveNoReplay(2, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(901, 902), "GPU")))
	wantEvents(t, out, removed(tReplica, "", fps(t, prompt, 1)...))
	if got := testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "start")); got != 1 {
		t.Fatalf("start clears = %v, want 1", got)
	}
}

func TestTranslate_AllBlocksClearedClearsOnlyThatReplica(t *testing.T) {
	h := newHarness(t, false)
	p := ot.Tokens(0, 4)
	h.liveNoReplay(0, ot.Batch(tTS, 0, ot.Stored(ot.Hashes(1), nil, p, 4, nil, nil, nil)))
	h.liveNoReplay(1, ot.Batch(tTS, 1, ot.Stored(ot.Hashes(1), nil, p, 4, nil, nil, nil)))
	out := h.liveNoReplay(2, ot.Batch(tTS, 1, ot.Cleared()))
	wantEvents(t, out, cleared(tReplica+"-dp1", tMs))
	// Rank 0 still knows engine hash 1; rank 1 no longer does.
	out = h.liveNoReplay(3, ot.Batch(tTS, 0, ot.Removed(ot.Hashes(1), nil)))
	wantEvents(t, out, removed(tReplica, "", fps(t, p, 0)...))
	out = h.liveNoReplay(4, ot.Batch(tTS, 1, ot.Removed(ot.Hashes(1), nil)))
	wantEvents(t, out)
	if got := testutil.ToFloat64(h.m.UnknownRemovals.WithLabelValues(tReplica)); got != 1 {
		t.Fatalf("unknown removals = %v, want 1", got)
	}
}

func TestTranslate_RestartClearsBeforeApplying(t *testing.T) {
	h := newHarness(t, false)
	a, b := ot.Tokens(0, 4), ot.Tokens(50, 4)
	h.liveNoReplay(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil)))
	h.liveNoReplay(1, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), uint64(1), b, 4, nil, nil, nil)))
	// seq back to 0: CLEARED comes first, then the new process's batch.
	out := h.liveNoReplay(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(7), nil, b, 4, nil, nil, nil)))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()), stored(tReplica, "", fps(t, b, 0), 0))
	// The old process's hashes are forgotten: a store chained on one of
	// them is dropped (unknown parent), and seq 1 applies normally.
	out = h.liveNoReplay(1, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(3), uint64(2), a, 4, nil, nil, nil)))
	wantEvents(t, out)
	if r, u := testutil.ToFloat64(h.m.Restarts.WithLabelValues(tReplica)), testutil.ToFloat64(h.m.UnknownParent.WithLabelValues(tReplica)); r != 1 || u != 1 {
		t.Fatalf("restarts = %v, unknown parents = %v; want 1, 1", r, u)
	}
}

func TestTranslate_GapWithoutReplayClearsAndCounts(t *testing.T) {
	h := newHarness(t, false)
	a := ot.Tokens(0, 4)
	h.liveNoReplay(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil)))
	out := h.liveNoReplay(3, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), nil, a, 4, nil, nil, nil)))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()), stored(tReplica, "", fps(t, a, 0), 0))
	if g, c := testutil.ToFloat64(h.m.Gaps.WithLabelValues(tReplica)), testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "gap")); g != 1 || c != 1 {
		t.Fatalf("gaps = %v, gap clears = %v; want 1, 1", g, c)
	}
	// Seq 4 follows normally.
	if out := h.liveNoReplay(4, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2), nil))); len(out) != 1 {
		t.Fatalf("after the gap: %v", out)
	}
}

func TestTranslate_GapWithReplayAppliesInSeqOrderAndNeverResurrects(t *testing.T) {
	h := newHarness(t, true)
	a, x := ot.Tokens(0, 4), ot.Tokens(10, 4)
	ax := append(append([]uint32{}, a...), x...)
	b0 := ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil))
	b1 := ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), uint64(1), x, 4, nil, nil, nil)) // store X
	b2 := ot.Batch(tTS, -1)                                                          // nothing
	b3 := ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2), nil))                           // remove X
	b4 := ot.Batch(tTS, -1, ot.Removed(ot.Hashes(1), nil))
	if _, req := h.live(0, b0); req != nil {
		t.Fatal("seq 0 must not replay")
	}
	// Live seq 3 arrives: gap 1..2 → replay from 1, seq 3 held back.
	out, req := h.live(3, b3)
	wantEvents(t, out)
	if req == nil || req.From != 1 {
		t.Fatalf("replay request = %+v, want from 1", req)
	}
	// Live seq 4 arrives during the replay: held back too.
	out, _ = h.live(4, b4)
	wantEvents(t, out)
	// The replay returns 1, 2, 3 (3 overlaps the held live batch).
	out = first(h.s.replayed(nil, req.Gen, 1, b1, tNow))
	wantEvents(t, out, stored(tReplica, "", fps(t, ax, 1), 4))
	out = first(h.s.replayed(first(h.s.replayed(nil, req.Gen, 2, b2, tNow)), req.Gen, 3, b3, tNow))
	wantEvents(t, out, removed(tReplica, "", fps(t, ax, 1)...))
	// End marker: the held live 3 is dropped (already applied), 4 applies.
	out = first(h.s.replayDone(nil, req.Gen, true, tNow))
	wantEvents(t, out, removed(tReplica, "", fps(t, a, 0)...))
	// A late reply of this replay storing X again must not resurrect X.
	if out := first(h.s.replayed(nil, req.Gen, 1, b1, tNow)); len(out) != 0 {
		t.Fatalf("late replayed store emitted %v", out)
	}
	if c, d := testutil.ToFloat64(h.m.Replays.WithLabelValues(tReplica, "complete")), testutil.ToFloat64(h.m.Duplicates.WithLabelValues(tReplica)); c != 1 || d != 1 {
		t.Fatalf("complete replays = %v, duplicates = %v; want 1, 1", c, d)
	}
	if got := testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "gap")); got != 0 {
		t.Fatalf("a filled gap must not clear: %v gap clears", got)
	}
}

func TestTranslate_LateReplayOfAbandonedReplayIsIgnored(t *testing.T) {
	h := newHarness(t, true)
	a, x := ot.Tokens(0, 4), ot.Tokens(10, 4)
	h.live(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil)))
	_, req := h.live(2, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(1), nil)))
	// The replay times out: the replica is cleared and the held batch applied.
	out := first(h.s.replayDone(nil, req.Gen, false, tNow))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()))
	// Its store of seq 1 shows up afterwards: ignored.
	if out := first(h.s.replayed(nil, req.Gen, 1, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), uint64(1), x, 4, nil, nil, nil)), tNow)); len(out) != 0 {
		t.Fatalf("late reply emitted %v", out)
	}
	if got := testutil.ToFloat64(h.m.Replays.WithLabelValues(tReplica, "failed")); got != 1 {
		t.Fatalf("failed replays = %v, want 1", got)
	}
}

func TestTranslate_ReplayThatCannotFillTheGapClears(t *testing.T) {
	h := newHarness(t, true)
	a := ot.Tokens(0, 4)
	h.live(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil)))
	_, req := h.live(20000, ot.Batch(tTS, -1))
	// The engine's buffer starts at 10000: batches 1..9999 are lost.
	out := first(h.s.replayed(nil, req.Gen, 10000, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(5), nil, a, 4, nil, nil, nil)), tNow))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()), stored(tReplica, "", fps(t, a, 0), 0))
	if got := testutil.ToFloat64(h.m.Replays.WithLabelValues(tReplica, "incomplete")); got != 1 {
		t.Fatalf("incomplete replays = %v, want 1", got)
	}
}

func TestTranslate_RejectsAndIgnores(t *testing.T) {
	p := ot.Tokens(0, 8)
	for _, tc := range []struct {
		name   string
		event  []any
		metric func(m *Metrics) float64
	}{
		{"unknown parent is dropped", ot.Stored(ot.Hashes(5), uint64(999), p[:4], 4, nil, nil, nil),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.UnknownParent.WithLabelValues(tReplica)) }},
		{"token length mismatch is rejected", ot.Stored(ot.Hashes(5, 6), nil, p[:7], 4, nil, nil, nil),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.TokenMismatch.WithLabelValues(tReplica)) }},
		{"block size mismatch is rejected loudly", ot.Stored(ot.Hashes(5), nil, p, 8, nil, nil, nil),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.BlockSizeMismatch.WithLabelValues(tReplica)) }},
		{"group_idx 1 is ignored", ot.Stored(ot.Hashes(5), nil, p[:4], 4, nil, "GPU", nil, nil, 1),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.IgnoredGroup.WithLabelValues(tReplica)) }},
		{"removal in group 1 is ignored", ot.Removed(ot.Hashes(5), nil, 1),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.IgnoredGroup.WithLabelValues(tReplica)) }},
		{"CPU medium is ignored by default", ot.Stored(ot.Hashes(5), nil, p[:4], 4, nil, "CPU", nil),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.IgnoredMedium.WithLabelValues(tReplica)) }},
		{"unknown hash removal is counted", ot.Removed(ot.Hashes(77), nil),
			func(m *Metrics) float64 { return testutil.ToFloat64(m.UnknownRemovals.WithLabelValues(tReplica)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.liveNoReplay(0, ot.Batch(tTS, -1))
			out := h.liveNoReplay(1, ot.Batch(tTS, -1, tc.event))
			wantEvents(t, out)
			if got := tc.metric(h.m); got != 1 {
				t.Fatalf("counter = %v, want 1", got)
			}
		})
	}
}

func TestTranslate_ConfiguredMediaAreIndexed(t *testing.T) {
	h := newHarness(t, false, func(e *EngineConfig) { e.Media = []string{"gpu", "cpu"} })
	p := ot.Tokens(0, 8)
	h.liveNoReplay(0, ot.Batch(tTS, -1))
	out := h.liveNoReplay(1, ot.Batch(tTS, -1,
		ot.Stored(ot.Hashes(1), nil, p[:4], 4, nil, "CPU", nil),
		ot.Stored(ot.Hashes(2), uint64(1), p[4:], 4, nil, nil, nil), // nil medium = GPU
		ot.Stored(ot.Hashes(3), nil, p[:4], 4, nil, "DISK", nil)))
	wantEvents(t, out, stored(tReplica, "", fps(t, p, 0)[:1], 0), stored(tReplica, "", fps(t, p, 1), 4))
}

func TestTranslate_LoraNameSelectsAdapterAndLoraIDIsADistinctSpace(t *testing.T) {
	h := newHarness(t, false)
	p := ot.Tokens(0, 4)
	h.liveNoReplay(0, ot.Batch(tTS, -1))
	out := h.liveNoReplay(1, ot.Batch(tTS, -1,
		ot.Stored(ot.Hashes(1), nil, p, 4, 7, nil, "sql-lora"), // name wins over id
		ot.Stored(ot.Hashes(2), nil, p, 4, 7, nil, nil),        // id only
		ot.Stored(ot.Hashes(3), nil, p, 4, nil, nil, nil),      // base
		ot.Stored(ot.Hashes(4), nil, p, 4, 0, nil, nil)))       // id 0 = base
	fp := fps(t, p, 0)
	wantEvents(t, out, stored(tReplica, "sql-lora", fp, 0), stored(tReplica, "lora-id:7", fp, 0), stored(tReplica, "", fp, 0), stored(tReplica, "", fp, 0))
	// One removal batch spanning partitions: one REMOVED per adapter, in
	// order of first appearance.
	out = h.liveNoReplay(2, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2, 1, 3, 4), nil)))
	wantEvents(t, out, removed(tReplica, "lora-id:7", fp...), removed(tReplica, "sql-lora", fp...), removed(tReplica, "", fp[0], fp[0]))
}

func TestTranslate_DPRanksAreSeparateReplicas(t *testing.T) {
	h := newHarness(t, false)
	p := ot.Tokens(0, 4)
	h.liveNoReplay(0, ot.Batch(tTS, -1))
	out := h.liveNoReplay(1, ot.Batch(tTS, 3, ot.Stored(ot.Hashes(1), nil, p, 4, nil, nil, nil)))
	wantEvents(t, out, stored(tReplica+"-dp3", "", fps(t, p, 0), 0))
	// Rank 0 never stored hash 1: its removal must not evict rank 3's block.
	out = h.liveNoReplay(2, ot.Batch(tTS, 0, ot.Removed(ot.Hashes(1), nil)))
	wantEvents(t, out)
}

func TestTranslate_UndecodableBatchClearsTheReplica(t *testing.T) {
	h := newHarness(t, false)
	h.liveNoReplay(0, ot.Batch(tTS, -1))
	out := h.liveNoReplay(1, []byte("garbage"))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()))
	if got := testutil.ToFloat64(h.m.DecodeErrors.WithLabelValues(tReplica)); got != 1 {
		t.Fatalf("decode errors = %v, want 1", got)
	}
}

// A parent of 0 (how llm-d's vLLM simulator marks a chain's first block)
// starts a chain like a nil parent: the block is stored with 0 tokens
// before it, and its child chains from it. A parent the subscriber never
// saw drops the blocks, counts them and warns once, naming the engine,
// the parent and the blocks lost.
func TestTranslate_ParentZeroStartsAChainUnknownParentWarns(t *testing.T) {
	c := &Config{Engines: []EngineConfig{{Endpoint: "tcp://127.0.0.1:5557", ReplicaID: tReplica, ModelID: "m", TenantID: "t", HashScheme: "vllm", BlockSize: 4}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	m := NewMetrics(nil)
	log := slog.New(slog.NewTextHandler(&logs, nil))
	em := m.forEngine(tReplica)
	h := &harness{t: t, m: m, cfg: &c.Engines[0], s: newSequencer(newTranslator(&c.Engines[0], 0, em, log), em, log, false)}
	prompt := ot.Tokens(100, 8)
	out := h.liveNoReplay(0, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(900), uint64(0), prompt[:4], 4, nil, "GPU", nil)))
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()), stored(tReplica, "", fps(t, prompt[:4], 0), 0))
	out = h.liveNoReplay(1, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(901), uint64(900), prompt[4:], 4, nil, "GPU", nil)))
	wantEvents(t, out, stored(tReplica, "", fps(t, prompt, 1), 4))
	if strings.Contains(logs.String(), "parent block is unknown") {
		t.Fatalf("warned for known parents: %s", logs.String())
	}
	out = h.liveNoReplay(2, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(903, 904), uint64(777), ot.Tokens(500, 8), 4, nil, "GPU", nil)))
	wantEvents(t, out)
	if got := testutil.ToFloat64(h.m.UnknownParent.WithLabelValues(tReplica)); got != 1 {
		t.Fatalf("unknown parent = %v, want 1", got)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "parent block is unknown") ||
		!strings.Contains(l, "parent=777") || !strings.Contains(l, "blocks_lost=2") || !strings.Contains(l, "engine="+tReplica) {
		t.Fatalf("warning %q: want WARN naming the engine, parent 777 and 2 blocks lost", l)
	}
}

// first drops a sequencer call's replay request (the cases here start none).
func first(dst []*pb.BlockEvent, _ *replayRequest) []*pb.BlockEvent { return dst }
