package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

func pos(id string, seq int64, h uint64) *fsmpb.StreamPosition {
	return &fsmpb.StreamPosition{ReplicaId: id, Seq: seq, BatchHash: h}
}

func held(f *FSM, ids ...string) map[string][2]uint64 {
	out := map[string][2]uint64{}
	for _, p := range f.StreamPositions(ids) {
		out[p.ReplicaId] = [2]uint64{uint64(p.Seq), p.BatchHash}
	}
	return out
}

// A recorded position is the latest per replica, survives a snapshot, and
// is forgotten by a CLEARED event of its replica (its claims are gone).
func TestStreamPositions_RecordSnapshotAndClear(t *testing.T) {
	for _, workers := range []int{1, 4} {
		b := &logBuilder{}
		b.add(t, command.IngestCommand("i1", events("a", 100, 4, 1_000)), command.StreamPositionsCommand("p1", []*fsmpb.StreamPosition{pos("a", 7, 0xaa), pos("b", 3, 0xbb)}))
		b.add(t, command.StreamPositionsCommand("p2", []*fsmpb.StreamPosition{pos("a", 9, 0xa9)}))
		f := New(policy.Default(), Options{ApplyWorkers: workers})
		for _, r := range f.ApplyBatch(b.logs) {
			for _, res := range r.(*EntryResult).Results {
				if res.Err != nil {
					t.Fatal(res.Err)
				}
			}
		}
		got := held(f, "a", "b", "c")
		if got["a"] != [2]uint64{9, 0xa9} || got["b"] != [2]uint64{3, 0xbb} || len(got) != 2 {
			t.Fatalf("workers %d: positions %v, want a at 9 and b at 3", workers, got)
		}
		var snap bytes.Buffer
		if _, err := f.WriteSnapshot(&snap); err != nil {
			t.Fatal(err)
		}
		g := New(policy.Default(), Options{})
		if err := g.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
			t.Fatal(err)
		}
		if got := held(g, "a", "b"); got["a"] != [2]uint64{9, 0xa9} || got["b"] != [2]uint64{3, 0xbb} {
			t.Fatalf("after restore: %v", got)
		}
		// Two ingest commands in one entry: the run path (workers > 1) too.
		b.add(t, command.IngestCommand("i2", []index.BlockEvent{{Kind: index.Cleared, ReplicaID: "a"}}), command.IngestCommand("i3", events("c", 300, 2, 2_000)))
		f.ApplyBatch(b.logs[len(b.logs)-1:])
		if got := held(f, "a", "b"); len(got) != 1 || got["b"] != [2]uint64{3, 0xbb} {
			t.Fatalf("workers %d: after CLEARED of a: %v, want only b", workers, got)
		}
	}
}
