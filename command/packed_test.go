package command

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/command/commandtest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// decodeBoth decodes a one-command entry through the fast path and
// through proto.Unmarshal + prepare.
func decodeBoth(t *testing.T, cmd []byte) (fast, generic Decoded) {
	t.Helper()
	entry := AppendCommand(NewEntry(nil), cmd)
	format, cmds, ok := new(Decoder).decodeFast(entry)
	if !ok || len(cmds) != 1 || format != EntryFormat {
		t.Fatalf("fast decode: ok=%v, %d commands, format %d", ok, len(cmds), format)
	}
	fast = cmds[0]
	prepare(&fast)
	e, err := DecodeEntry(entry)
	if err != nil {
		t.Fatal(err)
	}
	generic = Decoded{RequestID: e.Commands[0].GetRequestId(), Msg: e.Commands[0]}
	prepare(&generic)
	return fast, generic
}

// The packed form must decode, on both paths, to exactly the events it was
// made from: a follower decodes what the leader encoded.
func TestMarshalIngest_DecodesToSameEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 11))
	cases := 5000
	if testing.Short() {
		cases = 1000 // every id form and every seventh a many-event command still come up
	}
	for i := range cases {
		evs := commandtest.RandomEvents(rng)
		if i%7 == 0 { // many events sharing a few ids, as real commands do
			for range 40 {
				evs = append(evs, commandtest.RandomEvents(rng)...)
			}
		}
		id := []string{"", "req-1", "é" + strings.Repeat("x", 150)}[i%3]
		cmd, err := MarshalIngest(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		fast, generic := decodeBoth(t, cmd)
		want := normEvents(evs)
		for name, dc := range map[string]Decoded{"fast": fast, "generic": generic} {
			if dc.Err != nil || dc.Msg != nil || dc.RequestID != id {
				t.Fatalf("case %d %s: err %v, pb %v, id %q", i, name, dc.Err, dc.Msg, dc.RequestID)
			}
			if len(want) == 0 && len(dc.Events) == 0 {
				continue
			}
			if d := cmp.Diff(want, dc.Events); d != "" {
				t.Fatalf("case %d %s: decoded events differ (-sent +decoded):\n%s", i, name, d)
			}
		}
	}
}

// The hand encoder follows command.proto: the generated code reads the
// columns back under their names.
func TestMarshalIngest_ProtoDecodes(t *testing.T) {
	p1 := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}
	p2 := index.Partition{Scheme: "vllm", Model: "m2", Adapter: "a"}
	evs := []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r1", Partition: p1, BlockHashes: []uint64{1, 1 << 63}, BlockTokenCounts: []uint32{16, 16}, ObservedAtMs: 1000},
		{Kind: index.Removed, ReplicaID: "r2", Partition: p2, BlockHashes: []uint64{7}, PrefixTokensBefore: 32, ObservedAtMs: 990},
		{Kind: index.Cleared, ReplicaID: "r1", Partition: p1, ObservedAtMs: 995},
	}
	cmd, err := MarshalIngest("q", evs)
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
	plain, _ := Marshal(legacyIngestCommand("q", evs))
	t.Logf("packed %d bytes, protobuf (format 1) %d bytes", len(cmd), len(plain))
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

// An inconsistent packed command decodes to ErrPacked, alike on both
// decoding paths (fsm's TestPacked_InconsistentCommandRejected: apply
// rejects it whole).
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
			for name, dc := range map[string]Decoded{"fast": fast, "generic": generic} {
				if c.want == "" {
					if dc.Err != nil || len(dc.Events) != 1 {
						t.Fatalf("%s: %v, %d events", name, dc.Err, len(dc.Events))
					}
					continue
				}
				if !errors.Is(dc.Err, ErrPacked) || !strings.Contains(dc.Err.Error(), c.want) {
					t.Fatalf("%s: err %v, want ErrPacked naming %q", name, dc.Err, c.want)
				}
			}
		})
	}
}

// FuzzPackedDecode: any IngestPacked body decodes alike on the fast and
// the generic path (same events or both an error), never panics, and
// whatever decodes re-encodes to a command that decodes to the same events.
func FuzzPackedDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		cmd, err := MarshalIngest("id", commandtest.RandomEvents(rng))
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
		if (fast.Err == nil) != (generic.Err == nil) {
			t.Fatalf("fast err %v, generic err %v", fast.Err, generic.Err)
		}
		if fast.Err != nil {
			return
		}
		if !reflect.DeepEqual(normEvents(generic.Events), normEvents(fast.Events)) {
			t.Fatalf("fast and generic decodes differ:\n%+v\n%+v", generic.Events, fast.Events)
		}
		again, err := MarshalIngest(c.GetRequestId(), generic.Events)
		if err != nil {
			t.Fatalf("a decoded command does not re-encode: %v", err)
		}
		re, _ := decodeBoth(t, again)
		if re.Err != nil || !reflect.DeepEqual(normEvents(generic.Events), normEvents(re.Events)) {
			t.Fatalf("re-encoded command decodes differently: %v", re.Err)
		}
	})
}
