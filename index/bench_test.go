package index

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/policy"
)

// Benchmarks of the index. It is built by replaying the Mooncake
// conversation trace over 8 replicas (one block per 512-token hash id, the
// partial last block dropped), then topped up with synthetic 24-block
// chains to the target residency count. Each chain lands on one replica,
// or on two for half of the chains (1.5 residencies per block on average).
//
//	go test -run '^$' -bench . -benchtime 2s ./index/                  # 1 M
//	go test -run '^$' -bench . -benchtime 2s ./index/ -residencies 10000000

const (
	benchReplicas = 8
	benchChain    = 24
	traceBlock    = 512
)

type benchIndex struct {
	ix       *Index
	chains   [][]uint64 // synthetic chains (present)
	chainRep []int      // a replica holding chains[i]
	trace    [][]uint64 // trace prompts (present)
	misses   [][]uint64
	bytesRes float64
	res      int
}

var (
	benchMu    sync.Mutex
	benchCache = map[int]*benchIndex{}
)

func benchPolicy() policy.Policy {
	p := policy.Default()
	p.MaxResidencies = 1 << 32
	p.EvictionTTL = 7 * 24 * time.Hour
	p.MinimumMatchedTokens = 1
	p.RoutingFloorScore = "0"
	return p
}

func loadTrace(tb testing.TB) [][]uint64 {
	var out [][]uint64
	sc := bufio.NewScanner(fixtures.OpenTrace(tb, "conversation_trace"))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec struct {
			InputLength int      `json:"input_length"`
			HashIDs     []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("trace: %v", err)
		}
		k := min(rec.InputLength/traceBlock, len(rec.HashIDs))
		ch := make([]uint64, k)
		for i := range ch {
			ch[i] = fmix64(rec.HashIDs[i] + 1) // a hash id names a block
		}
		if k > 0 {
			out = append(out, ch)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("trace: %v", err)
	}
	return out
}

func replicaName(i int) string { return fmt.Sprintf("replica-%d", i) }

func storeEvent(rep int, chain []uint64, counts []uint32, seen int64) BlockEvent {
	return BlockEvent{Kind: Stored, ReplicaID: replicaName(rep), Partition: vllm, BlockHashes: chain, BlockTokenCounts: counts[:len(chain)], ObservedAtMs: seen}
}

func buildBench(tb testing.TB, residencies int) *benchIndex {
	benchMu.Lock()
	defer benchMu.Unlock()
	if bi := benchCache[residencies]; bi != nil {
		return bi
	}
	// Free a previously built size before measuring this one.
	clear(benchCache)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	trace := loadTrace(tb)
	bi := &benchIndex{ix: New(benchPolicy()), trace: trace}
	counts := make([]uint32, 4096)
	for i := range counts {
		counts[i] = traceBlock
	}
	for i, ch := range trace {
		bi.ix.ApplyEvents([]BlockEvent{storeEvent(i%benchReplicas, ch, counts, t0)})
	}
	for i := range counts {
		counts[i] = 16
	}
	rng := rand.New(rand.NewPCG(42, 42))
	for bi.ix.Sizes().Residencies < residencies {
		ch := make([]uint64, benchChain)
		for j := range ch {
			ch[j] = rng.Uint64()
		}
		r := rng.IntN(benchReplicas)
		evs := []BlockEvent{storeEvent(r, ch, counts, t0)}
		if rng.IntN(2) == 0 {
			evs = append(evs, storeEvent((r+1)%benchReplicas, ch, counts, t0))
		}
		bi.ix.ApplyEvents(evs)
		if len(bi.chains) < 1<<16 {
			bi.chains = append(bi.chains, ch)
			bi.chainRep = append(bi.chainRep, r)
		}
	}
	for i := 0; i < 1<<12; i++ {
		ch := make([]uint64, benchChain)
		for j := range ch {
			ch[j] = rng.Uint64()
		}
		bi.misses = append(bi.misses, ch)
	}
	runtime.GC()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	bi.res = bi.ix.Sizes().Residencies
	bi.bytesRes = float64(after.HeapAlloc-before.HeapAlloc) / float64(bi.res)
	benchCache[residencies] = bi
	return bi
}

var benchResidencies = func() []int {
	if v := os.Getenv("INDEX_BENCH_RESIDENCIES"); v != "" {
		var n int
		fmt.Sscan(v, &n)
		return []int{n}
	}
	return []int{1_000_000}
}()

func forSizes(b *testing.B, fn func(b *testing.B, bi *benchIndex)) {
	for _, n := range benchResidencies {
		b.Run(fmt.Sprintf("res=%dM", n/1_000_000), func(b *testing.B) {
			fn(b, buildBench(b, n))
		})
	}
}

// BenchmarkMemory reports bytes per residency after GC (heap growth over
// the build, divided by residencies: block table, slabs and meta).
func BenchmarkMemory(b *testing.B) {
	forSizes(b, func(b *testing.B, bi *benchIndex) {
		for range b.N {
		}
		b.ReportMetric(bi.bytesRes, "B/residency")
		b.ReportMetric(float64(bi.res), "residencies")
	})
}

// cpuLoop runs fn(i) for i in [0, b.N) on one locked OS thread and reports
// the thread's CPU time per op as "cpu-ns/op" (see threadCPU).
func cpuLoop(b *testing.B, fn func(i int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := threadCPU()
	b.ResetTimer()
	for i := range b.N {
		fn(i)
	}
	b.StopTimer()
	if c1, ok1 := threadCPU(); ok && ok1 {
		b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
	}
}

func BenchmarkLookupHit24(b *testing.B) {
	forSizes(b, func(b *testing.B, bi *benchIndex) {
		var r Result
		reqs := make([]LookupRequest, len(bi.chains))
		for i, ch := range bi.chains {
			reqs[i] = LookupRequest{Partition: vllm, BlockHashes: ch, NowMs: t0}
		}
		b.ReportAllocs()
		cpuLoop(b, func(i int) { bi.ix.Lookup(&reqs[i%len(reqs)], &r) })
		if r.Reason != PrefixMatch {
			b.Fatalf("expected a hit, got %v %s", r.Reason, r.Detail)
		}
	})
}

func BenchmarkLookupMiss24(b *testing.B) {
	forSizes(b, func(b *testing.B, bi *benchIndex) {
		var r Result
		reqs := make([]LookupRequest, len(bi.misses))
		for i, ch := range bi.misses {
			reqs[i] = LookupRequest{Partition: vllm, BlockHashes: ch, NowMs: t0}
		}
		b.ReportAllocs()
		cpuLoop(b, func(i int) { bi.ix.Lookup(&reqs[i%len(reqs)], &r) })
	})
}

// BenchmarkLookupTrace looks up the Mooncake prompts themselves.
func BenchmarkLookupTrace(b *testing.B) {
	forSizes(b, func(b *testing.B, bi *benchIndex) {
		var r Result
		reqs := make([]LookupRequest, len(bi.trace))
		for i, ch := range bi.trace {
			reqs[i] = LookupRequest{Partition: vllm, BlockHashes: ch, NowMs: t0}
		}
		b.ReportAllocs()
		cpuLoop(b, func(i int) { bi.ix.Lookup(&reqs[i%len(reqs)], &r) })
	})
}

// BenchmarkApply measures STORED block events per second on one core into
// a fresh index (new blocks: the expensive path).
func BenchmarkApply(b *testing.B) {
	const perEvent = 24
	counts := make([]uint32, perEvent)
	for i := range counts {
		counts[i] = 16
	}
	rng := rand.New(rand.NewPCG(1, 1))
	evs := make([]BlockEvent, 1<<14)
	for i := range evs {
		ch := make([]uint64, perEvent)
		for j := range ch {
			ch[j] = rng.Uint64()
		}
		evs[i] = storeEvent(rng.IntN(benchReplicas), ch, counts, t0+int64(i))
	}
	ix := New(benchPolicy())
	b.ResetTimer()
	for i := range b.N {
		if i%len(evs) == 0 && i > 0 {
			b.StopTimer()
			ix = New(benchPolicy())
			b.StartTimer()
		}
		ix.ApplyEvents(evs[i%len(evs) : i%len(evs)+1])
	}
	b.ReportMetric(float64(b.N*perEvent)/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkLookupLatency reports p50/p99 of single lookups (hit, 24
// blocks), idle and while a writer applies events at full speed on the
// other core.
func BenchmarkLookupLatency(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := "idle"
		if busy {
			name = "writer-busy"
		}
		b.Run(name, func(b *testing.B) {
			forSizes(b, func(b *testing.B, bi *benchIndex) {
				stop := make(chan struct{})
				var applied atomic.Int64
				var wg sync.WaitGroup
				if busy {
					wg.Add(1)
					go func() {
						defer wg.Done()
						counts := make([]uint32, benchChain)
						for i := range counts {
							counts[i] = 16
						}
						i := 0
						for {
							select {
							case <-stop:
								return
							default:
							}
							// Refresh existing chains: steady-state ingest
							// without growing the index.
							ch := bi.chains[i%len(bi.chains)]
							bi.ix.ApplyEvents([]BlockEvent{storeEvent(i%benchReplicas, ch, counts, t0+int64(i))})
							applied.Add(benchChain)
							i++
						}
					}()
				}
				var r Result
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := range b.N {
					req := LookupRequest{Partition: vllm, BlockHashes: bi.chains[(i*7919)%len(bi.chains)], NowMs: t0}
					st := time.Now()
					bi.ix.Lookup(&req, &r)
					lat = append(lat, time.Since(st))
				}
				b.StopTimer()
				close(stop)
				wg.Wait()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				if busy {
					b.ReportMetric(float64(applied.Load())/b.Elapsed().Seconds(), "writer-blocks/s")
				}
			})
		})
	}
}

// BenchmarkApplyBatch measures one ingest command's apply the way the FSM
// calls it (64 STORED events of 4 blocks, 256 blocks per op) into an index
// that already holds INDEX_BENCH_RESIDENCIES (default 1 M) residencies:
// "new" stores blocks never seen, "refresh" re-stores held blocks with a
// newer last_seen, "other-replica" adds a second replica to held blocks,
// "new-at-capacity" stores new blocks into an index at MaxResidencies,
// where every block stored evicts one (LRU).
func BenchmarkApplyBatch(b *testing.B) {
	const events, perEvent = 64, 4
	counts := []uint32{16, 16, 16, 16}
	for _, mode := range []string{"new", "refresh", "other-replica", "new-at-capacity"} {
		for _, n := range benchResidencies {
			b.Run(fmt.Sprintf("%s/res=%dM", mode, n/1_000_000), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(7, 7))
				ix := New(benchPolicy())
				var held []uint64
				// Each prefill call (256 events) and each batch gets its
				// own millisecond, like live traffic, so LRU keys mostly
				// differ (an eviction's ties at its threshold are few).
				now := t0
				for ix.Sizes().Residencies < n {
					now++
					ch := make([]uint64, 1024)
					for j := range ch {
						ch[j] = rng.Uint64()
					}
					evs := make([]BlockEvent, 0, len(ch)/perEvent)
					for j := 0; j < len(ch); j += perEvent {
						evs = append(evs, storeEvent(0, ch[j:j+perEvent], counts, now))
					}
					ix.ApplyEvents(evs)
					held = append(held, ch...)
				}
				if mode == "new-at-capacity" {
					// MaxResidencies = the prefill: every new block
					// evicts (LRU), as in a cluster that is full.
					p := benchPolicy()
					p.MaxResidencies = uint64(ix.Sizes().Residencies)
					ix.SetPolicy(p)
				}
				batches := make([][]BlockEvent, 256)
				for k := range batches {
					evs := make([]BlockEvent, events)
					for e := range evs {
						ch := make([]uint64, perEvent)
						for j := range ch {
							if mode == "new" || mode == "new-at-capacity" {
								ch[j] = rng.Uint64()
							} else {
								ch[j] = held[rng.IntN(len(held))]
							}
						}
						rep := 0
						if mode == "other-replica" {
							rep = 1 + k%(benchReplicas-1)
						}
						evs[e] = storeEvent(rep, ch, counts, now+1+int64(k))
					}
					batches[k] = evs
				}
				b.ReportAllocs()
				cpuLoop(b, func(i int) {
					evs := batches[i%len(batches)]
					if i >= len(batches) { // time moves on
						for e := range evs {
							evs[e].ObservedAtMs += int64(len(batches))
							if mode == "new" || mode == "new-at-capacity" {
								for j := range evs[e].BlockHashes { // fresh blocks again
									evs[e].BlockHashes[j] = rng.Uint64()
								}
							}
						}
					}
					ix.ApplyEvents(evs)
				})
				b.ReportMetric(float64(b.N*events*perEvent)/b.Elapsed().Seconds(), "blocks/s")
			})
		}
	}
}

// rankIndex: 16 replicas hold nested prefixes of one 4-block chain
// (replica i the first 4 − i%4 blocks), each with fresh stats, so a lookup
// of the chain ranks and sorts 16 candidates after a short walk: the
// lookup where ranking is the largest share of the cost.
func rankIndex() (*Index, LookupRequest) {
	ix := New(benchPolicy())
	chain := make([]uint64, 4)
	counts := make([]uint32, 4)
	for i := range chain {
		chain[i], counts[i] = fmix64(uint64(i)+1), 16
	}
	for r := range 16 {
		ix.ApplyEvents([]BlockEvent{storeEvent(r, chain[:4-r%4], counts, t0)})
		ix.ApplyStats([]ReplicaStats{{ReplicaID: replicaName(r), ModelID: vllm.Model, HashSchemes: []string{vllm.Scheme},
			Pressure: float64(r) / 32, ObservedAtMs: t0, WaitingRequests: uint32(r), RunningRequests: 2}})
	}
	return ix, LookupRequest{Partition: vllm, BlockHashes: chain, SLOTTFTMs: 100, NowMs: t0}
}

// BenchmarkLookupExplain is a lookup without and with Explain: "rank16"
// ranks 16 matched replicas (rankIndex), "hit24" is BenchmarkLookupHit24's
// lookups. Explain off must cost what a lookup cost before Explain
// existed (BENCHMARKS.md, "Explain").
func BenchmarkLookupExplain(b *testing.B) {
	for _, explain := range []bool{false, true} {
		name := "explain=off"
		if explain {
			name = "explain=on"
		}
		b.Run("rank16/"+name, func(b *testing.B) {
			ix, req := rankIndex()
			req.Explain = explain
			var r Result
			b.ReportAllocs()
			cpuLoop(b, func(int) { ix.Lookup(&req, &r) })
			if r.Reason != PrefixMatch || len(r.Hints) != 4 || (len(r.Factors) == 4) != explain {
				b.Fatalf("got %v, %d hints, %d factors", r.Reason, len(r.Hints), len(r.Factors))
			}
		})
		b.Run("hit24/"+name, func(b *testing.B) {
			forSizes(b, func(b *testing.B, bi *benchIndex) {
				var r Result
				reqs := make([]LookupRequest, len(bi.chains))
				for i, ch := range bi.chains {
					reqs[i] = LookupRequest{Partition: vllm, BlockHashes: ch, NowMs: t0, Explain: explain}
				}
				b.ReportAllocs()
				cpuLoop(b, func(i int) { bi.ix.Lookup(&reqs[i%len(reqs)], &r) })
			})
		})
	}
}
