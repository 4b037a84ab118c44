package fsm

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/command/commandtest"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// legacyEntry starts an entry of format 1 (what older logs hold).
func legacyEntry() []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)
}

// inconsistentPacked is a packed ingest command with one event whose
// columns edit has made inconsistent (command's
// TestPacked_InconsistentCommandRejected has the decoder's view).
func inconsistentPacked(t *testing.T, edit func(m *fsmpb.IngestPacked)) []byte {
	t.Helper()
	m := &fsmpb.IngestPacked{Partitions: []*fsmpb.Partition{{Scheme: "s", Model: "m"}}, Replicas: []string{"r0"},
		Kinds: []uint32{uint32(index.Stored)}, ReplicaRefs: []uint32{0}, PartitionRefs: []uint32{0},
		HashLens: []uint32{2}, CountLens: []uint32{2}, PrefixTokensBefore: []uint32{0}, ObservedAtDeltas: []int64{1000},
		BlockHashes: []uint64{5, 6}, BlockTokenCounts: []uint32{16, 16}}
	edit(m)
	b, err := proto.Marshal(&fsmpb.Command{RequestId: "bad", Body: &fsmpb.Command_IngestPacked{IngestPacked: m}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An inconsistent packed command is rejected whole and changes nothing.
func TestPacked_InconsistentCommandRejected(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(m *fsmpb.IngestPacked)
		want string
	}{
		{"consistent", func(*fsmpb.IngestPacked) {}, ""},
		{"short column", func(m *fsmpb.IngestPacked) { m.PrefixTokensBefore = nil }, "prefix_tokens_before has 0 values for 1 events"},
		{"replica ref out of range", func(m *fsmpb.IngestPacked) { m.ReplicaRefs = []uint32{1} }, "names replica 1 of 1"},
		{"partition ref out of range", func(m *fsmpb.IngestPacked) { m.Partitions = nil }, "partition 0 of 0"},
		{"hash lens past the column", func(m *fsmpb.IngestPacked) { m.HashLens = []uint32{3} }, "runs past the block columns"},
		{"hashes left over", func(m *fsmpb.IngestPacked) { m.HashLens = []uint32{1} }, "2 block hashes and 2 token counts, the events use 1 and 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New(policy.Default(), Options{TmpDir: t.TempDir()})
			entry := command.AppendCommand(command.NewEntry(nil), inconsistentPacked(t, c.edit))
			res := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: entry}).(*EntryResult)
			err := res.Results[0].Err
			if c.want == "" {
				if err != nil || f.Index().Sizes().Blocks != 2 {
					t.Fatalf("apply: %v, %d blocks", err, f.Index().Sizes().Blocks)
				}
				return
			}
			if !errors.Is(err, ErrRejected) || !errors.Is(err, command.ErrPacked) || !strings.Contains(err.Error(), c.want) || f.Index().Sizes().Blocks != 0 {
				t.Fatalf("apply: %v with %d blocks; want ErrRejected+ErrPacked naming %q and nothing applied", err, f.Index().Sizes().Blocks, c.want)
			}
		})
	}
}

// The same writes reach the same state whichever form carried them (a
// log may hold entries of format 1), and a retry of a packed write found
// in the protobuf form is taken for the retry it is.
func TestPacked_SameStateAsProtobufAndDedup(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	plainF := New(policy.Default(), Options{TmpDir: t.TempDir()})
	packedF := New(policy.Default(), Options{TmpDir: t.TempDir()})
	var idx uint64
	for i := range 300 {
		evs := commandtest.RandomEvents(rng)
		id := "req-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		pc := legacyIngest(t, id, evs)
		kc, err := command.MarshalIngest(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		r1 := plainF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: command.AppendCommand(legacyEntry(), pc)}).(*EntryResult)
		r2 := packedF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: command.AppendCommand(command.NewEntry(nil), kc)}).(*EntryResult)
		if cmp.Diff(r1.Results[0], r2.Results[0], cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })) != "" {
			t.Fatalf("write %d: results differ: %+v vs %+v", i, r1.Results[0], r2.Results[0])
		}
		// the retry, in the other form
		idx++
		r3 := packedF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: command.AppendCommand(legacyEntry(), pc)}).(*EntryResult)
		plainF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: command.AppendCommand(command.NewEntry(nil), kc)})
		if r := r3.Results[0]; !r.Duplicate || r.Index != idx-1 || errors.Is(r.Err, ErrRequestIDReused) {
			t.Fatalf("write %d: retry in the other form: %+v, want a duplicate of index %d", i, r, idx-1)
		}
	}
	_, d1 := plainF.Digest()
	_, d2 := packedF.Digest()
	if d1 != d2 || plainF.Index().Sizes().Blocks == 0 {
		t.Fatalf("digests %x (protobuf) and %x (packed), %d blocks", d1, d2, plainF.Index().Sizes().Blocks)
	}
}

// A packed command in a format-1 entry (only a faulty writer makes one) is
// rejected, as a binary that predates format 2 rejects it: both kinds of
// node keep the same state.
func TestApply_PackedCommandInFormat1EntryRejected(t *testing.T) {
	evs := []index.BlockEvent{{Kind: index.Stored, ReplicaID: "r", Partition: index.Partition{Scheme: "s", Model: "m"}, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{16}}}
	kc, _ := command.MarshalIngest("a", evs)
	pc := legacyIngest(t, "b", evs)
	for _, fast := range []bool{true, false} {
		entry := command.AppendCommand(command.AppendCommand(legacyEntry(), kc), pc)
		if !fast { // an unknown top-level field sends the whole entry down the generic path
			entry = protowire.AppendTag(entry, 9, protowire.VarintType)
			entry = protowire.AppendVarint(entry, 1)
		}
		f := New(policy.Default(), Options{TmpDir: t.TempDir()})
		res := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: entry}).(*EntryResult)
		if len(res.Results) != 2 {
			t.Fatalf("fast=%v: %d results", fast, len(res.Results))
		}
		// Exactly what a binary without packed commands records (fsm.go's
		// "unknown command" case), so their dedup windows agree.
		if err := res.Results[0].Err; err == nil || err.Error() != "fsm: command rejected: unknown command at index 1 (written by a newer binary?)" {
			t.Fatalf("fast=%v: packed command in a format-1 entry: %v", fast, err)
		}
		if err := res.Results[1].Err; err != nil || f.Index().Sizes().Blocks != 1 {
			t.Fatalf("fast=%v: the protobuf command beside it: %v, %d blocks", fast, err, f.Index().Sizes().Blocks)
		}
	}
}
