package fsm_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// fuzzSeeds are valid entries of every command kind (the fuzzer mutates
// them); testdata/fuzz/FuzzApplyEntry holds the same as seed files
// (regenerate with FUZZ_WRITE_SEEDS=1 go test -run TestFuzzSeeds ./fsm).
func fuzzSeeds(t testing.TB) [][]byte {
	p := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t", Adapter: "a"}
	evs := []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r1", Partition: p, BlockHashes: []uint64{1, 2, 3}, BlockTokenCounts: []uint32{16, 16, 8}, ObservedAtMs: 1000},
		{Kind: index.Removed, ReplicaID: "r1", Partition: p, BlockHashes: []uint64{3}, BlockTokenCounts: []uint32{8}, PrefixTokensBefore: 32, ObservedAtMs: 1001},
		{Kind: index.Cleared, ReplicaID: "r2", ObservedAtMs: 1002},
	}
	st := []index.ReplicaStats{{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.5, TenantHitRate: map[string]float64{"t": 0.3}, ObservedAtMs: 1000}}
	cmds := [][]*fsmpb.Command{
		{command.IngestCommand("req-1", evs)},
		{command.StatsCommand("req-2", st)},
		{command.SetPolicyCommand("req-3", policy.Default())},
		{command.ExpireCommand("req-4", 5000)},
		{command.CreditCommand("", p, []uint64{1, 2})},
		{command.RestoreMarkCommand("req-5", 7, 9)},
		{command.IngestCommand("a", evs[:1]), command.IngestCommand("a", evs[:1]), command.ExpireCommand("b", 1<<40)},
	}
	var out [][]byte
	for _, c := range cmds {
		b, err := command.EncodeEntry(c...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// An entry of format 1, as older logs hold (protobuf ingest events).
	legacy, err := proto.Marshal(&fsmpb.Entry{Format: 1, Commands: []*fsmpb.Command{{RequestId: "req-6",
		Body: &fsmpb.Command_Ingest{Ingest: &fsmpb.Ingest{Events: fsmpb.EventsToPB(evs)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, legacy)
	return append(out, nil, []byte{0x08, 0x02}, []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
}

// FuzzApplyEntry feeds arbitrary log entries to the command decoder and
// apply: no input may panic the FSM (a panic on apply would crash every
// node at the same index), every entry gets a result, and two FSMs
// applying the same entries reach the same digest (determinism).
func FuzzApplyEntry(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	// Two FSMs live across inputs (New costs milliseconds); both apply the
	// same sequence, so their digests must stay equal.
	tmp := f.TempDir()
	a := fsm.New(policy.Default(), fsm.Options{TmpDir: tmp})
	b := fsm.New(policy.Default(), fsm.Options{TmpDir: tmp})
	var idx uint64
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = command.DecodeEntry(data)
		if _, err := command.VerifyEntry(data); err != nil {
			// A sealed entry with a wrong checksum stops an FSM for good
			// (TestApply_CorruptEntryStopsTheFSM); these two must live on.
			t.Skip()
		}
		idx += 2
		var digests [2]uint64
		for k, m := range []*fsm.FSM{a, b} {
			res := m.ApplyBatch([]*raft.Log{
				{Index: idx - 1, Term: 1, Type: raft.LogCommand, Data: data},
				{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}, // a retry of the same entry
			})
			if len(res) != 2 {
				t.Fatalf("%d results for 2 entries", len(res))
			}
			for i, r := range res {
				if er, ok := r.(*fsm.EntryResult); !ok || er == nil {
					t.Fatalf("entry %d: result %T", i, r)
				}
			}
			if m.AppliedIndex() != idx {
				t.Fatalf("applied index %d, want %d", m.AppliedIndex(), idx)
			}
			_, digests[k] = m.Digest()
		}
		if digests[0] != digests[1] {
			t.Fatalf("same entries, different digests %x %x", digests[0], digests[1])
		}
	})
}

// TestFuzzSeeds_WriteCorpus writes the seed corpus files when
// FUZZ_WRITE_SEEDS is set.
func TestFuzzSeeds_WriteCorpus(t *testing.T) {
	if os.Getenv("FUZZ_WRITE_SEEDS") == "" {
		t.Skip("set FUZZ_WRITE_SEEDS=1 to rewrite testdata/fuzz/FuzzApplyEntry")
	}
	writeCorpus(t, "FuzzApplyEntry", fuzzSeeds(t))
}

func writeCorpus(t *testing.T, name string, seeds [][]byte) {
	dir := filepath.Join("testdata", "fuzz", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range seeds {
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n[]byte(")
		b.WriteString(strconv.Quote(string(s)))
		b.WriteString(")\n")
		if err := os.WriteFile(filepath.Join(dir, "seed-"+strconv.Itoa(i)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
