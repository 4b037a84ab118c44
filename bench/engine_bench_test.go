package bench

import "testing"

// BenchmarkEngine_Serve replays the generator's trace (2,000 requests,
// seed 1) round robin over 8 engines of 166 blocks (its default run's
// cache): the engines' share of a replay, per request.
func BenchmarkEngine_Serve(b *testing.B) {
	tr := Generate(GeneratorConfig{Seed: 1, Requests: 2000})
	cfg := FleetConfig{Engines: 8, CacheBlocks: 166}
	if err := cfg.fill(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		f := NewFleet(cfg, "m", "")
		for i := range tr.Requests {
			q := &tr.Requests[i]
			f.Engines[i%8].Serve(q, float64(q.Timestamp)/1000)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tr.Requests)), "ns/request")
}
