package command

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/command/commandtest"

	"github.com/inference-cache/inference-cache/index"
)

// The hand encoder must produce exactly what the generated code produces
// from IngestCommand's message: entries built either way are the same
// entries.
func TestMarshalIngest_SameBytesAsProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for i := range 5000 {
		evs := commandtest.RandomEvents(rng)
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
