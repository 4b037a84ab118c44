package observe

import (
	"io"
	"log/slog"
	"testing"
	"time"

	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// BenchmarkDecodeTranslate measures decode + translate of engine batches
// into BlockEvents (the sink discards them): each batch holds 32 BlockStored
// events of 4 blocks of 16 tokens chained on the previous event, and the
// matching BlockRemoved events, as a steady engine emits them. Reported:
// block events per second (one stored or removed block = one block event).
func BenchmarkDecodeTranslate(b *testing.B) {
	c := &Config{Engines: []EngineConfig{{Endpoint: "tcp://127.0.0.1:1", ReplicaID: "e", ModelID: "m", HashScheme: "vllm", BlockSize: 16}}}
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	m := NewMetrics(nil)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	em := m.forEngine("e")
	s := newSequencer(newTranslator(&c.Engines[0], 0, em, log), em, log, false)
	const events, blocks = 32, 4
	var payloads [][]byte
	for p := 0; p < 8; p++ {
		var st, rm []any
		for e := 0; e < events; e++ {
			base := uint64(p*1_000_000 + e*blocks + 1)
			hs := ot.Hashes(base, base+1, base+2, base+3)
			var parent any
			if e > 0 {
				parent = base - 1
			}
			st = append(st, ot.Stored(hs, parent, ot.Tokens(p*100000+e*64, 64), 16, nil, "GPU", nil))
			rm = append(rm, ot.Removed(hs, "GPU"))
		}
		payloads = append(payloads, ot.Batch(tTS, 0, st...), ot.Batch(tTS, 0, rm...))
	}
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	seq := int64(0)
	for i := 0; i < b.N; i++ {
		for _, p := range payloads {
			_ = s.applyPayload(nil, seq, p, now)
			seq++
		}
	}
	blockEvents := float64(b.N) * float64(len(payloads)) * events * blocks
	b.ReportMetric(blockEvents/b.Elapsed().Seconds(), "blockevents/s")
	b.ReportMetric(b.Elapsed().Seconds()/blockEvents*1e6, "cpu-s/1M-blockevents")
}
