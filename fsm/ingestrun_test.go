package fsm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// An FSM that applies an entry's consecutive ingest commands as one
// parallel batch must return, command by command, what the FSM applying
// them one by one returns, and reach the same state: through duplicates
// of earlier entries, ids repeated within an entry, commands without ids,
// packed and protobuf commands side by side, other commands between them.
func TestApplyIngestRun_SameAsOneByOne(t *testing.T) {
	one := New(policy.Default(), Options{TmpDir: t.TempDir()})
	par := New(policy.Default(), Options{TmpDir: t.TempDir(), ApplyWorkers: 3})
	rng := rand.New(rand.NewPCG(9, 9))
	var held []uint64
	batch := func() []index.BlockEvent {
		evs := make([]index.BlockEvent, 32+rng.IntN(64))
		for e := range evs {
			hs := make([]uint64, 4)
			for j := range hs {
				if len(held) > 0 && rng.IntN(3) == 0 {
					hs[j] = held[rng.IntN(len(held))]
				} else {
					hs[j] = rng.Uint64()
					held = append(held, hs[j])
				}
			}
			evs[e] = index.BlockEvent{Kind: index.Stored, ReplicaID: fmt.Sprint("r", rng.IntN(6)), Partition: part,
				BlockHashes: hs, BlockTokenCounts: []uint32{16, 16, 16, 16}, ObservedAtMs: 1000 + int64(rng.IntN(500))}
		}
		return evs
	}
	var sent []string // ids of earlier commands, for retries
	idx := uint64(0)
	for round := range 60 {
		entry := command.NewEntry(nil)
		n := 1 + rng.IntN(30)
		for c := 0; c < n; c++ {
			id := fmt.Sprintf("req-%d-%d", round, c)
			switch rng.IntN(12) {
			case 0:
				id = ""
			case 1:
				if len(sent) > 0 {
					id = sent[rng.IntN(len(sent))] // a retry of an applied command: a duplicate, or a reused id
				}
			case 2:
				if c > 0 {
					id = fmt.Sprintf("req-%d-%d", round, c-1) // repeated within the entry
				}
			}
			var cmd []byte
			var err error
			switch rng.IntN(6) {
			case 0:
				cmd, err = command.Marshal(command.ExpireCommand(id, 900))
			case 1, 2:
				cmd = legacyIngest(t, id, batch()) // read from logs of format 1
			default:
				cmd, err = command.MarshalIngest(id, batch())
			}
			if err != nil {
				t.Fatal(err)
			}
			entry = command.AppendCommand(entry, cmd)
			if id != "" {
				sent = append(sent, id)
			}
		}
		idx++
		l := &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: entry}
		r1 := one.Apply(l).(*EntryResult)
		r2 := par.Apply(l).(*EntryResult)
		if len(r1.Results) != len(r2.Results) {
			t.Fatalf("round %d: %d vs %d results", round, len(r1.Results), len(r2.Results))
		}
		for i := range r1.Results {
			a, b := r1.Results[i], r2.Results[i]
			if a.RequestID != b.RequestID || a.Index != b.Index || a.Changed != b.Changed || a.Duplicate != b.Duplicate ||
				(a.Err == nil) != (b.Err == nil) || errors.Is(a.Err, ErrRequestIDReused) != errors.Is(b.Err, ErrRequestIDReused) {
				t.Fatalf("round %d command %d: one by one %+v, as a run %+v", round, i, a, b)
			}
		}
		if _, d1 := one.Digest(); func() bool { _, d2 := par.Digest(); return d1 != d2 }() {
			t.Fatalf("round %d: digests differ", round)
		}
	}
	if par.Index().ParallelBatches() == 0 {
		t.Fatal("no run was applied in parallel: the test compared nothing")
	}
	t.Logf("%d runs applied in parallel", par.Index().ParallelBatches())
}

// A panic while a run applies stops the FSM (a node applying the commands
// one by one would have rejected only one of them, so going on could
// diverge): the entry does not count as applied, nothing applies after
// it, no snapshot is taken, and the owner is told.
func TestApplyIngestRun_PanicStopsTheFSM(t *testing.T) {
	var told error
	f := New(policy.Default(), Options{TmpDir: t.TempDir(), ApplyWorkers: 2, OnCorrupt: func(_ uint64, err error) { told = err }})
	entry := func(round int) []byte {
		e := command.NewEntry(nil)
		for c := 0; c < 3; c++ {
			cmd, err := command.MarshalIngest(fmt.Sprintf("req-%d-%d", round, c), events("r1", uint64(round*100+c*10), 4, 1000))
			if err != nil {
				t.Fatal(err)
			}
			e = command.AppendCommand(e, cmd)
		}
		return e
	}
	if r := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: entry(1)}).(*EntryResult); r.Results[0].Err != nil {
		t.Fatal(r.Results[0].Err)
	}
	testRunHook = func() { panic("boom") }
	defer func() { testRunHook = nil }()
	r := f.Apply(&raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: entry(2)}).(*EntryResult)
	testRunHook = nil
	if len(r.Results) == 0 || !errors.Is(r.Results[0].Err, ErrApplyPanic) || !errors.Is(told, ErrApplyPanic) {
		t.Fatalf("results %+v, told %v; want ErrApplyPanic both", r.Results, told)
	}
	if f.AppliedIndex() != 1 {
		t.Fatalf("applied index %d after the panicking entry, want 1", f.AppliedIndex())
	}
	r = f.Apply(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: entry(3)}).(*EntryResult)
	if !errors.Is(r.Results[0].Err, ErrApplyPanic) || f.AppliedIndex() != 1 {
		t.Fatalf("a later entry: %v, applied index %d", r.Results[0].Err, f.AppliedIndex())
	}
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("a stopped FSM took a snapshot")
	}
}
