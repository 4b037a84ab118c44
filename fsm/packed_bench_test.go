package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/inference-cache/inference-cache/index"
)

// realisticCommand is one ingest call as a vLLM fleet sends it: 64 STORED
// events of 4 blocks with random 64-bit block hashes (what a content hash
// gives), ids of production length, one partition, 8 replicas.
func realisticCommand(rng *rand.Rand) []index.BlockEvent {
	p := index.Partition{Scheme: "vllm-sha256-cbor-64", Model: "meta-llama/Llama-3.1-8B-Instruct", Tenant: "tenant-0042"}
	evs := make([]index.BlockEvent, 64)
	for i := range evs {
		hs := make([]uint64, 4)
		for k := range hs {
			hs[k] = rng.Uint64()
		}
		evs[i] = index.BlockEvent{Kind: index.Stored, ReplicaID: fmt.Sprintf("vllm-decode-%d.vllm.svc:8000", i%8), Partition: p,
			BlockHashes: hs, BlockTokenCounts: []uint32{16, 16, 16, 16}, PrefixTokensBefore: uint32(64 * (i % 4)),
			ObservedAtMs: 1_767_000_000_000 + int64(i)}
	}
	return evs
}

// BenchmarkIngestEncoding encodes and decodes one entry of 16 realistic
// ingest commands in each form, reporting the entry's bytes per event (what
// the log store, the transport and every node's decoder handle).
func BenchmarkIngestEncoding(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	cmds := make([][]index.BlockEvent, 16)
	for i := range cmds {
		cmds[i] = realisticCommand(rng)
	}
	for _, form := range []struct {
		name   string
		format uint32
		enc    func(string, []index.BlockEvent) ([]byte, error)
	}{{"protobuf", 1, MarshalIngest}, {"packed", EntryFormatPacked, MarshalIngestPacked}} {
		entry := func() []byte {
			e := NewEntryFormat(nil, form.format)
			for i, evs := range cmds {
				c, err := form.enc(fmt.Sprint("req-", i), evs)
				if err != nil {
					b.Fatal(err)
				}
				e = AppendCommand(e, c)
			}
			return e
		}
		b.Run(form.name+"/encode", func(b *testing.B) {
			for b.Loop() {
				entry()
			}
			b.ReportMetric(float64(len(entry()))/(16*64), "bytes/event")
		})
		b.Run(form.name+"/decode", func(b *testing.B) {
			e := entry()
			var a decodeArena
			for b.Loop() {
				if _, _, ok := decodeEntryFast(e, &a); !ok {
					b.Fatal("entry does not fast-decode")
				}
			}
			b.ReportMetric(float64(len(e))/(16*64), "bytes/event")
		})
	}
}
