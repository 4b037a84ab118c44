package observe

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// The engine history of these tests: seq 0 stores A, seq 1 stores X after
// A, seq 2 removes X.
func resumeHistory() (b0, b1, b2 []byte, a, ax []uint32) {
	a, x := ot.Tokens(0, 4), ot.Tokens(10, 4)
	ax = append(append([]uint32{}, a...), x...)
	b0 = ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil))
	b1 = ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), uint64(1), x, 4, nil, nil, nil))
	b2 = ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2), nil))
	return
}

func (h *harness) resumes(outcome string) float64 {
	return testutil.ToFloat64(h.m.Resumes.WithLabelValues(tReplica, outcome))
}

// A restarted subscriber whose position the engine's replay proves keeps
// the hints: no CLEARED, the batches up to the position are not sent
// again, and a later removal of a block stored before the restart is
// translated (the replay rebuilt the map).
func TestResume_ReplayProvingThePositionKeepsHints(t *testing.T) {
	h := newHarness(t, true)
	b0, b1, b2, _, ax := resumeHistory()
	h.s.setResume(&Position{Seq: 1, Hash: batchHash(b1)})
	out, req := h.s.connected(nil, false, tNow)
	wantEvents(t, out)
	if req == nil || req.From != 0 {
		t.Fatalf("replay request %+v, want one from 0", req)
	}
	out, _ = h.live(2, b2) // held while the check runs
	wantEvents(t, out)
	out = first(h.s.replayed(nil, req.Gen, 0, b0, tNow))
	out = first(h.s.replayed(out, req.Gen, 1, b1, tNow))
	wantEvents(t, out)
	out = first(h.s.replayed(out, req.Gen, 2, b2, tNow))
	wantEvents(t, out, removed(tReplica, "", fps(t, ax, 1)...))
	out = first(h.s.replayDone(nil, req.Gen, true, tNow))
	wantEvents(t, out) // the held live 2 was applied by the replay
	if h.resumes("kept") != 1 || testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "start")) != 0 {
		t.Fatalf("kept %v, start clears %v; want 1, 0", h.resumes("kept"), testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "start")))
	}
	if p := h.s.position(); p == nil || p.Seq != 2 || p.Hash != batchHash(b2) {
		t.Fatalf("position %+v, want seq 2", p)
	}
}

// The same seq with other bytes is another engine process: the replica is
// cleared and replayed from 0, whose batches are then sent.
func TestResume_AnotherBatchAtThePositionClearsAndReplays(t *testing.T) {
	h := newHarness(t, true)
	b0, b1, _, a, ax := resumeHistory()
	h.s.setResume(&Position{Seq: 1, Hash: batchHash(b1) + 1})
	_, req := h.s.connected(nil, false, tNow)
	out := first(h.s.replayed(nil, req.Gen, 0, b0, tNow))
	wantEvents(t, out)
	out, again := h.s.replayed(nil, req.Gen, 1, b1, tNow)
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()))
	if again == nil || again.From != 0 || again.Gen == req.Gen {
		t.Fatalf("second replay %+v, want a new one from 0", again)
	}
	out = first(h.s.replayed(nil, again.Gen, 0, b0, tNow))
	out = first(h.s.replayed(out, again.Gen, 1, b1, tNow))
	wantEvents(t, out, stored(tReplica, "", fps(t, a, 0), 0), stored(tReplica, "", fps(t, ax, 1), 4))
	if h.resumes("cleared") != 1 || testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "restart")) != 1 {
		t.Fatal("want one cleared resume, one restart clear")
	}
}

// A replay that ends before the position: the engine restarted and has
// fewer batches than the cluster applied.
func TestResume_StreamShorterThanThePositionClears(t *testing.T) {
	h := newHarness(t, true)
	b0, _, _, _, _ := resumeHistory()
	h.s.setResume(&Position{Seq: 5, Hash: 7})
	_, req := h.s.connected(nil, false, tNow)
	wantEvents(t, first(h.s.replayed(nil, req.Gen, 0, b0, tNow)))
	out, again := h.s.replayDone(nil, req.Gen, true, tNow)
	wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()))
	if again == nil || again.From != 0 {
		t.Fatalf("want a replay from 0, got %+v", again)
	}
}

// A reconnect checks the last applied batch: the same process keeps its
// hints, a restarted one (no batch there) is cleared before it sends any
// event.
func TestResume_ReconnectToARestartedEngineClearsAtOnce(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		h := newHarness(t, true)
		b0, b1, _, _, _ := resumeHistory()
		h.live(0, b0)
		h.live(1, b1)
		out, req := h.s.connected(nil, true, tNow)
		wantEvents(t, out)
		if req == nil || req.From != 1 {
			t.Fatalf("reconnect check %+v, want a replay from 1", req)
		}
		if restarted {
			out, _ = h.s.replayDone(nil, req.Gen, true, tNow) // nothing at seq 1
			wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()))
			continue
		}
		out = first(h.s.replayed(nil, req.Gen, 1, b1, tNow))
		out = first(h.s.replayDone(out, req.Gen, true, tNow))
		wantEvents(t, out)
		if h.resumes("kept") != 1 {
			t.Fatal("the same engine after a reconnect must keep its hints")
		}
	}
}

// Without a replay endpoint: the next seq keeps the hints until the engine
// removes a block the subscriber cannot translate; a reset or a gap clears.
func TestResume_WithoutReplay(t *testing.T) {
	_, b1, b2, _, _ := resumeHistory()
	h := newHarness(t, false)
	h.s.setResume(&Position{Seq: 1, Hash: batchHash(b1)})
	if out, req := h.s.connected(nil, false, tNow); len(out) != 0 || req != nil {
		t.Fatal("without replay the first live batch decides")
	}
	// seq 2 removes X, stored before the restart: unknown here → clear.
	out := h.liveNoReplay(2, b2)
	wantEvents(t, out, cleared(tReplica, tMs))
	if h.resumes("kept_unverified") != 1 || testutil.ToFloat64(h.m.Clears.WithLabelValues(tReplica, "partial_map")) != 1 {
		t.Fatal("want a kept_unverified resume, then a partial_map clear")
	}
	for _, seq := range []int64{1, 3} { // a reset, missed events
		h := newHarness(t, false)
		h.s.setResume(&Position{Seq: 1, Hash: batchHash(b1)})
		out := h.liveNoReplay(seq, ot.Batch(tTS, -1))
		wantEvents(t, out, cleared(tReplica, tNow.UnixMilli()))
		if h.resumes("cleared") != 1 {
			t.Fatalf("seq %d after position 1: want a cleared resume", seq)
		}
	}
}
