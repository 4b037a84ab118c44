package command

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/index"
)

// randomEvents draws events over the whole value range of every field,
// zero values included (proto3 omits those, so they exercise every
// "field absent" branch).
func randomEvents(rng *rand.Rand) []index.BlockEvent {
	strs := []string{"", "r", "replica-7", "xxh3-64", "Qwen/Qwen3-8B", "tenant-ü", "lora:a/b", strings.Repeat("z", 200)}
	u64 := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint64(rng.IntN(300))
		case 2:
			return math.MaxUint64 - uint64(rng.IntN(3))
		}
		return rng.Uint64()
	}
	evs := make([]index.BlockEvent, rng.IntN(6))
	for i := range evs {
		e := &evs[i]
		e.Kind = index.EventKind(rng.IntN(4))
		e.ReplicaID = strs[rng.IntN(len(strs))]
		e.Partition = index.Partition{Scheme: strs[rng.IntN(len(strs))], Model: strs[rng.IntN(len(strs))],
			Tenant: strs[rng.IntN(len(strs))], Adapter: strs[rng.IntN(len(strs))]}
		for range rng.IntN(5) {
			e.BlockHashes = append(e.BlockHashes, u64())
		}
		for range rng.IntN(5) {
			e.BlockTokenCounts = append(e.BlockTokenCounts, uint32(u64()))
		}
		e.PrefixTokensBefore = uint32(u64())
		switch rng.IntN(3) {
		case 1:
			e.ObservedAtMs = int64(u64())
		case 2:
			e.ObservedAtMs = -int64(rng.IntN(1000)) - 1
		}
	}
	return evs
}

// The hand encoder must produce exactly what the generated code produces
// from IngestCommand's message: entries built either way are the same
// entries.
func TestMarshalIngest_SameBytesAsProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for i := range 5000 {
		evs := randomEvents(rng)
		id := []string{"", "req-1", "é" + strings.Repeat("x", 150)}[i%3]
		want, err := Marshal(IngestCommand(id, evs))
		if err != nil {
			t.Fatal(err)
		}
		got, err := MarshalIngest(id, evs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: events %+v\nhand  %x\nproto %x", i, evs, got, want)
		}
	}
}

func TestMarshalIngest_InvalidUTF8(t *testing.T) {
	bad := "\xff\xfe"
	ok := index.BlockEvent{Kind: index.Stored, ReplicaID: "r", Partition: index.Partition{Scheme: "s", Model: "m"}}
	cases := []struct {
		name, id, field string
		ev              func(e *index.BlockEvent)
	}{
		{"request id", bad, "request_id", func(*index.BlockEvent) {}},
		{"replica", "q", "event 1: replica_id", func(e *index.BlockEvent) { e.ReplicaID = bad }},
		{"scheme", "q", "event 1: hash_scheme", func(e *index.BlockEvent) { e.Partition.Scheme = bad }},
		{"model", "q", "event 1: model_id", func(e *index.BlockEvent) { e.Partition.Model = bad }},
		{"tenant", "q", "event 1: tenant_id", func(e *index.BlockEvent) { e.Partition.Tenant = bad }},
		{"adapter", "q", "event 1: adapter_id", func(e *index.BlockEvent) { e.Partition.Adapter = bad }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			second := ok
			c.ev(&second)
			evs := []index.BlockEvent{ok, second}
			if _, err := Marshal(IngestCommand(c.id, evs)); err == nil {
				t.Fatal("proto encoded invalid UTF-8: the case does not test anything")
			}
			b, err := MarshalIngest(c.id, evs)
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("got %x, %v; want an error naming %q", b, err, c.field)
			}
		})
	}
}
