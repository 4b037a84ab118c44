package fsm

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/fsm/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// decodeBoth decodes a one-command entry of format 2 through the fast
// path and through proto.Unmarshal + prepareCommand.
func decodeBoth(t *testing.T, cmd []byte) (fast, generic decodedCommand) {
	t.Helper()
	entry := AppendCommand(NewEntryFormat(nil, EntryFormatPacked), cmd)
	format, cmds, ok := decodeEntryFast(entry, nil)
	if !ok || len(cmds) != 1 || format != EntryFormatPacked {
		t.Fatalf("fast decode: ok=%v, %d commands, format %d", ok, len(cmds), format)
	}
	fast = cmds[0]
	prepareCommand(&fast)
	e, err := DecodeEntry(entry)
	if err != nil {
		t.Fatal(err)
	}
	generic = decodedCommand{requestID: e.Commands[0].GetRequestId(), pb: e.Commands[0]}
	prepareCommand(&generic)
	return fast, generic
}

// The packed form must decode, on both paths, to exactly the events it was
// made from: a follower decodes what the leader encoded.
func TestMarshalIngestPacked_DecodesToSameEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 11))
	for i := range 5000 {
		evs := randomEvents(rng)
		if i%7 == 0 { // many events sharing a few ids, as real commands do
			for range 40 {
				evs = append(evs, randomEvents(rng)...)
			}
		}
		id := []string{"", "req-1", "é" + strings.Repeat("x", 150)}[i%3]
		cmd, err := MarshalIngestPacked(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		if CommandFormat(cmd) != EntryFormatPacked {
			t.Fatalf("case %d: CommandFormat %d", i, CommandFormat(cmd))
		}
		fast, generic := decodeBoth(t, cmd)
		want := normEvents(evs)
		for name, dc := range map[string]decodedCommand{"fast": fast, "generic": generic} {
			if dc.err != nil || dc.pb != nil || dc.requestID != id {
				t.Fatalf("case %d %s: err %v, pb %v, id %q", i, name, dc.err, dc.pb, dc.requestID)
			}
			if len(want) == 0 && len(dc.events) == 0 {
				continue
			}
			if d := cmp.Diff(want, dc.events); d != "" {
				t.Fatalf("case %d %s: decoded events differ (-sent +decoded):\n%s", i, name, d)
			}
		}
		// Converting back gives the protobuf form's exact bytes.
		proto1, err := MarshalIngest(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnpackIngest(cmd)
		if err != nil || !bytes.Equal(back, proto1) {
			t.Fatalf("case %d: UnpackIngest = %x, %v; want %x", i, back, err, proto1)
		}
	}
}

// The hand encoder follows command.proto: the generated code reads the
// columns back under their names.
func TestMarshalIngestPacked_ProtoDecodes(t *testing.T) {
	p1 := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}
	p2 := index.Partition{Scheme: "vllm", Model: "m2", Adapter: "a"}
	evs := []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r1", Partition: p1, BlockHashes: []uint64{1, 1 << 63}, BlockTokenCounts: []uint32{16, 16}, ObservedAtMs: 1000},
		{Kind: index.Removed, ReplicaID: "r2", Partition: p2, BlockHashes: []uint64{7}, PrefixTokensBefore: 32, ObservedAtMs: 990},
		{Kind: index.Cleared, ReplicaID: "r1", Partition: p1, ObservedAtMs: 995},
	}
	cmd, err := MarshalIngestPacked("q", evs)
	if err != nil {
		t.Fatal(err)
	}
	var c fsmpb.Command
	if err := proto.Unmarshal(cmd, &c); err != nil {
		t.Fatal(err)
	}
	want := &fsmpb.IngestPacked{
		Partitions:         []*fsmpb.Partition{{Scheme: "vllm", Model: "m", Tenant: "t"}, {Scheme: "vllm", Model: "m2", Adapter: "a"}},
		Replicas:           []string{"r1", "r2"},
		Kinds:              []uint32{uint32(index.Stored), uint32(index.Removed), uint32(index.Cleared)},
		ReplicaRefs:        []uint32{0, 1, 0},
		PartitionRefs:      []uint32{0, 1, 0},
		HashLens:           []uint32{2, 1, 0},
		CountLens:          []uint32{2, 0, 0},
		PrefixTokensBefore: []uint32{0, 32, 0},
		ObservedAtDeltas:   []int64{1000, -10, 5},
		BlockHashes:        []uint64{1, 1 << 63, 7},
		BlockTokenCounts:   []uint32{16, 16},
	}
	if c.GetRequestId() != "q" || !proto.Equal(c.GetIngestPacked(), want) {
		t.Fatalf("decoded %v, want request_id q and %v", &c, want)
	}
	// 8 bytes per hash, not 10: the point of the format.
	plain, _ := MarshalIngest("q", evs)
	t.Logf("packed %d bytes, protobuf %d bytes", len(cmd), len(plain))
}

func TestCommandFormat(t *testing.T) {
	evs := []index.BlockEvent{{Kind: index.Stored, ReplicaID: "r", Partition: index.Partition{Scheme: "s", Model: "m"}, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{16}}}
	packed, _ := MarshalIngestPacked("a", evs)
	plain, _ := MarshalIngest("a", evs)
	stats, _ := MarshalCommand(StatsCommand("b", []index.ReplicaStats{{ReplicaID: "r"}}))
	for _, c := range []struct {
		name string
		cmd  []byte
		want uint32
	}{{"packed", packed, 2}, {"protobuf ingest", plain, 1}, {"stats", stats, 1}, {"empty", nil, 1}, {"garbage", []byte{0xff}, 1}} {
		if got := CommandFormat(c.cmd); got != c.want {
			t.Errorf("%s: CommandFormat = %d, want %d", c.name, got, c.want)
		}
	}
	if got, err := UnpackIngest(stats); err != nil || !bytes.Equal(got, stats) {
		t.Errorf("UnpackIngest(stats) = %x, %v; want it unchanged", got, err)
	}
}

// packedBody builds an IngestPacked body column by column, for
// inconsistent commands no encoder writes.
func packedBody(cols map[protowire.Number][]uint64, parts, replicas int) []byte {
	var b []byte
	for range parts {
		b = protowire.AppendTag(b, pkPartitions, protowire.BytesType)
		b = protowire.AppendBytes(b, appendPartition(nil, &index.Partition{Scheme: "s", Model: "m"}))
	}
	for i := range replicas {
		b = protowire.AppendTag(b, pkReplicas, protowire.BytesType)
		b = protowire.AppendString(b, "r"+string(rune('0'+i)))
	}
	for num := protowire.Number(pkKinds); num <= pkCounts; num++ {
		v, ok := cols[num]
		if !ok {
			continue
		}
		var col []byte
		for _, x := range v {
			switch num {
			case pkHashes:
				col = protowire.AppendFixed64(col, x)
			case pkObservedDelta:
				col = protowire.AppendVarint(col, protowire.EncodeZigZag(int64(x)))
			default:
				col = protowire.AppendVarint(col, x)
			}
		}
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, col)
	}
	cmd := protowire.AppendTag(nil, 1, protowire.BytesType)
	cmd = protowire.AppendString(cmd, "bad")
	cmd = protowire.AppendTag(cmd, cmdIngestPacked, protowire.BytesType)
	return protowire.AppendBytes(cmd, b)
}

// An inconsistent packed command is rejected whole, alike on both decoding
// paths, and changes nothing.
func TestPacked_InconsistentCommandRejected(t *testing.T) {
	one := func(v uint64) []uint64 { return []uint64{v} }
	good := func() map[protowire.Number][]uint64 {
		return map[protowire.Number][]uint64{pkKinds: one(uint64(index.Stored)), pkReplicaRefs: one(0), pkPartitionRefs: one(0),
			pkHashLens: one(2), pkCountLens: one(2), pkPrefixTokens: one(0), pkObservedDelta: one(1000),
			pkHashes: {5, 6}, pkCounts: {16, 16}}
	}
	cases := []struct {
		name  string
		edit  func(m map[protowire.Number][]uint64)
		parts int
		want  string
	}{
		{"consistent", func(map[protowire.Number][]uint64) {}, 1, ""},
		{"short column", func(m map[protowire.Number][]uint64) { delete(m, pkPrefixTokens) }, 1, "prefix_tokens_before has 0 values for 1 events"},
		{"replica ref out of range", func(m map[protowire.Number][]uint64) { m[pkReplicaRefs] = one(1) }, 1, "names replica 1 of 1"},
		{"partition ref out of range", func(m map[protowire.Number][]uint64) {}, 0, "partition 0 of 0"},
		{"hash lens past the column", func(m map[protowire.Number][]uint64) { m[pkHashLens] = one(3) }, 1, "runs past the block columns"},
		{"hashes left over", func(m map[protowire.Number][]uint64) { m[pkHashLens] = one(1) }, 1, "2 block hashes and 2 token counts, the events use 1 and 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := good()
			c.edit(m)
			cmd := packedBody(m, c.parts, 1)
			fast, generic := decodeBoth(t, cmd)
			for name, dc := range map[string]decodedCommand{"fast": fast, "generic": generic} {
				if c.want == "" {
					if dc.err != nil || len(dc.events) != 1 {
						t.Fatalf("%s: %v, %d events", name, dc.err, len(dc.events))
					}
					continue
				}
				if !errors.Is(dc.err, ErrPacked) || !strings.Contains(dc.err.Error(), c.want) {
					t.Fatalf("%s: err %v, want ErrPacked naming %q", name, dc.err, c.want)
				}
			}
			if _, err := UnpackIngest(cmd); (err != nil) != (c.want != "") {
				t.Fatalf("UnpackIngest: %v", err)
			}
			f := New(policy.Default(), Options{TmpDir: t.TempDir()})
			entry := AppendCommand(NewEntryFormat(nil, EntryFormatPacked), cmd)
			res := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: entry}).(*EntryResult)
			err := res.Results[0].Err
			if c.want == "" {
				if err != nil || f.Index().Sizes().Blocks != 2 {
					t.Fatalf("apply: %v, %d blocks", err, f.Index().Sizes().Blocks)
				}
				return
			}
			if !errors.Is(err, ErrRejected) || !errors.Is(err, ErrPacked) || f.Index().Sizes().Blocks != 0 {
				t.Fatalf("apply: %v with %d blocks; want ErrRejected+ErrPacked and nothing applied", err, f.Index().Sizes().Blocks)
			}
		})
	}
}

// The same writes reach the same state whichever form carried them, and a
// retry of a packed write sent in the protobuf form (another node
// encoded it) is taken for the retry it is.
func TestPacked_SameStateAsProtobufAndDedup(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	plainF := New(policy.Default(), Options{TmpDir: t.TempDir()})
	packedF := New(policy.Default(), Options{TmpDir: t.TempDir()})
	var idx uint64
	for i := range 300 {
		evs := randomEvents(rng)
		id := "req-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		pc, err := MarshalIngest(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := MarshalIngestPacked(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		r1 := plainF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: AppendCommand(NewEntry(nil), pc)}).(*EntryResult)
		r2 := packedF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: AppendCommand(NewEntryFormat(nil, 2), kc)}).(*EntryResult)
		if cmp.Diff(r1.Results[0], r2.Results[0], cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })) != "" {
			t.Fatalf("write %d: results differ: %+v vs %+v", i, r1.Results[0], r2.Results[0])
		}
		// the retry, in the other form
		idx++
		r3 := packedF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: AppendCommand(NewEntry(nil), pc)}).(*EntryResult)
		plainF.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: AppendCommand(NewEntryFormat(nil, 2), kc)})
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

// A node that applies only format 1 (an older binary, or one configured so
// for upgrade tests) refuses a format-2 entry whole.
func TestApply_Format2RefusedByFormat1FSM(t *testing.T) {
	evs := []index.BlockEvent{{Kind: index.Stored, ReplicaID: "r", Partition: index.Partition{Scheme: "s", Model: "m"}, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{16}}}
	kc, _ := MarshalIngestPacked("a", evs)
	pc, _ := MarshalIngest("b", evs)
	old := New(policy.Default(), Options{TmpDir: t.TempDir(), MaxEntryFormat: 1})
	res := old.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: AppendCommand(AppendCommand(NewEntryFormat(nil, 2), kc), pc)}).(*EntryResult)
	for i, r := range res.Results {
		if !errors.Is(r.Err, ErrEntryFormat) || !strings.Contains(r.Err.Error(), "format 2, this binary applies ≤ 1") {
			t.Fatalf("command %d: %v, want ErrEntryFormat", i, r.Err)
		}
	}
	if old.Index().Sizes().Blocks != 0 {
		t.Fatal("a refused entry changed state")
	}
	res = old.Apply(&raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: AppendCommand(NewEntry(nil), pc)}).(*EntryResult)
	if res.Results[0].Err != nil || old.Index().Sizes().Blocks != 1 {
		t.Fatalf("format 1 entry: %v", res.Results[0].Err)
	}
}

// FuzzPackedDecode: any IngestPacked body decodes alike on the fast and
// the generic path (same events or both an error), never panics, and
// whatever decodes re-encodes to a command that decodes to the same events.
func FuzzPackedDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		cmd, err := MarshalIngestPacked("id", randomEvents(rng))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(cmd)
	}
	f.Add(packedBody(map[protowire.Number][]uint64{pkKinds: {1}, pkHashLens: {9}}, 1, 1))
	f.Fuzz(func(t *testing.T, cmd []byte) {
		var c fsmpb.Command
		if proto.Unmarshal(cmd, &c) != nil || c.GetIngestPacked() == nil {
			t.Skip()
		}
		fast, generic := decodeBoth(t, cmd)
		if (fast.err == nil) != (generic.err == nil) {
			t.Fatalf("fast err %v, generic err %v", fast.err, generic.err)
		}
		if fast.err != nil {
			return
		}
		if !reflect.DeepEqual(normEvents(generic.events), normEvents(fast.events)) {
			t.Fatalf("fast and generic decodes differ:\n%+v\n%+v", generic.events, fast.events)
		}
		again, err := MarshalIngestPacked(c.GetRequestId(), generic.events)
		if err != nil {
			t.Fatalf("a decoded command does not re-encode: %v", err)
		}
		re, _ := decodeBoth(t, again)
		if re.err != nil || !reflect.DeepEqual(normEvents(generic.events), normEvents(re.events)) {
			t.Fatalf("re-encoded command decodes differently: %v", re.err)
		}
	})
}

// A packed command in a format-1 entry (only a faulty writer makes one) is
// rejected, as a binary that predates format 2 rejects it: both kinds of
// node keep the same state.
func TestApply_PackedCommandInFormat1EntryRejected(t *testing.T) {
	evs := []index.BlockEvent{{Kind: index.Stored, ReplicaID: "r", Partition: index.Partition{Scheme: "s", Model: "m"}, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{16}}}
	kc, _ := MarshalIngestPacked("a", evs)
	pc, _ := MarshalIngest("b", evs)
	for _, fast := range []bool{true, false} {
		entry := AppendCommand(AppendCommand(NewEntry(nil), kc), pc)
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
