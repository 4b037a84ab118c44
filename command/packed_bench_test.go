package command

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/inference-cache/inference-cache/command/fsmpb"
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
// ingest commands, reporting the entry's bytes per event (what the log
// store, the transport and every node's decoder handle). "packed" is the
// format written; "protobuf" is the decode of the same events in an entry
// of format 1, which is still read.
func BenchmarkIngestEncoding(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	cmds := make([][]index.BlockEvent, 16)
	for i := range cmds {
		cmds[i] = realisticCommand(rng)
	}
	packed := func() []byte {
		e := NewEntry(nil)
		for i, evs := range cmds {
			c, err := MarshalIngest(fmt.Sprint("req-", i), evs)
			if err != nil {
				b.Fatal(err)
			}
			e = AppendCommand(e, c)
		}
		return e
	}
	legacy := func() []byte {
		var cs []*fsmpb.Command
		for i, evs := range cmds {
			cs = append(cs, legacyIngestCommand(fmt.Sprint("req-", i), evs))
		}
		return legacyEntry(b, cs...)
	}
	b.Run("packed/encode", func(b *testing.B) {
		for b.Loop() {
			packed()
		}
		b.ReportMetric(float64(len(packed()))/(16*64), "bytes/event")
	})
	for _, form := range []struct {
		name  string
		entry func() []byte
	}{{"protobuf", legacy}, {"packed", packed}} {
		b.Run(form.name+"/decode", func(b *testing.B) {
			e := form.entry()
			var a Decoder
			for b.Loop() {
				if _, _, ok := a.decodeFast(e); !ok {
					b.Fatal("entry does not fast-decode")
				}
			}
			b.ReportMetric(float64(len(e))/(16*64), "bytes/event")
		})
	}
}
