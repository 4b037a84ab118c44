package index

import "testing"

// NewestObservedMs is the largest observation time applied: stored
// events and stats raise it, removals and older times do not, and an
// index loaded from a snapshot's records starts from their last_seen.
func TestNewestObservedMs_TracksStoredStatsAndSnapshots(t *testing.T) {
	ix := New(testPolicy())
	if got := ix.NewestObservedMs(); got != 0 {
		t.Fatalf("empty index: %d, want 0", got)
	}
	ix.ApplyEvents([]BlockEvent{stored("r1", vllm, 5000, 1, 2), stored("r2", vllm, 3000, 3)})
	if got := ix.NewestObservedMs(); got != 5000 {
		t.Fatalf("after stores at 5000 and 3000: %d, want 5000", got)
	}
	ix.ApplyEvents([]BlockEvent{{Kind: Removed, ReplicaID: "r1", Partition: vllm, BlockHashes: []uint64{1}, ObservedAtMs: 9000}})
	if got := ix.NewestObservedMs(); got != 5000 {
		t.Fatalf("a removal at 9000 moved it to %d; only observations of what is held count", got)
	}
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "r2", ModelID: "m", ObservedAtMs: 7000}})
	if got := ix.NewestObservedMs(); got != 7000 {
		t.Fatalf("after stats at 7000: %d, want 7000", got)
	}
	b := NewBuilder(testPolicy())
	if err := b.AddBlock(BlockRecord{Partition: vllm, Hash: 1, Tokens: 16, Residents: []Residency{{ReplicaID: "r1", LastSeenMs: 4000}, {ReplicaID: "r2", LastSeenMs: 6000}}}); err != nil {
		t.Fatal(err)
	}
	loaded := b.Build()
	if got := loaded.NewestObservedMs(); got != 6000 {
		t.Fatalf("loaded from records seen at 4000 and 6000: %d, want 6000", got)
	}
}
