package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/policy"
)

func sealed(t *testing.T, idx uint64, body []byte) *raft.Log {
	t.Helper()
	return &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: command.SealEntry(nil, body)}
}

// A sealed entry applies exactly like its unsealed body.
func TestSealEntry_AppliesLikeTheBody(t *testing.T) {
	body, err := command.EncodeEntry(command.IngestCommand("r1", events("a", 1, 8, 1_000)), command.StatsCommand("s", nil))
	if err != nil {
		t.Fatal(err)
	}
	plain, seal := New(policy.Default(), Options{}), New(policy.Default(), Options{})
	plain.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: body})
	r := seal.Apply(sealed(t, 1, body)).(*EntryResult)
	if r.Results[0].Err != nil {
		t.Fatal(r.Results[0].Err)
	}
	pi, pd := plain.Digest()
	si, sd := seal.Digest()
	if pi != si || pd != sd || sd == New(policy.Default(), Options{}).Index().Digest() {
		t.Fatalf("sealed (%d,%x) vs plain (%d,%x)", si, sd, pi, pd)
	}
}

// A damaged entry stops the FSM: nothing of it or after it applies, the
// applied index stays before it, snapshots are refused, and the owner is
// told once.
func TestApply_CorruptEntryStopsTheFSM(t *testing.T) {
	var told []uint64
	f := New(policy.Default(), Options{OnCorrupt: func(idx uint64, err error) {
		if !errors.Is(err, command.ErrCorrupt) {
			t.Errorf("OnCorrupt err %v", err)
		}
		told = append(told, idx)
	}})
	good, _ := command.EncodeEntry(command.IngestCommand("r1", events("a", 1, 4, 1_000)))
	f.Apply(sealed(t, 1, good))
	i1, d1 := f.Digest()
	bad := sealed(t, 2, mustEncode(t, command.IngestCommand("r2", events("b", 100, 4, 1_000))))
	bad.Data[len(bad.Data)-3] ^= 0x10 // a flipped bit in a block hash
	later := sealed(t, 3, mustEncode(t, command.IngestCommand("r3", events("c", 200, 4, 1_000))))
	res := f.ApplyBatch([]*raft.Log{bad, later})
	for i, r := range res {
		er := r.(*EntryResult)
		if len(er.Results) != 1 || !errors.Is(er.Results[0].Err, command.ErrCorrupt) {
			t.Fatalf("entry %d: %+v, want command.ErrCorrupt", i+2, er.Results)
		}
	}
	if i2, d2 := f.Digest(); i2 != i1 || d2 != d1 {
		t.Fatalf("state moved past the damaged entry: (%d,%x) → (%d,%x)", i1, d1, i2, d2)
	}
	if len(told) != 1 || told[0] != 2 {
		t.Fatalf("OnCorrupt calls %v, want [2]", told)
	}
	if _, err := f.Snapshot(); !errors.Is(err, command.ErrCorrupt) {
		t.Fatalf("snapshot after a damaged entry: %v", err)
	}
}

func mustEncode(t *testing.T, c ...*fsmpb.Command) []byte {
	t.Helper()
	b, err := command.EncodeEntry(c...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
