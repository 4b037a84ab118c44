package index

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkViewFirstApply measures the writer stall after a snapshot: take
// View(), then time the first ApplyEvents, which must preserve the view's
// data for everything it changes (a copy of every pinned shard it touched
// before the undo log; a pre-image of every block it changes now).
// "blocks=256" is one ingest call's worth (64 events of 4 blocks, as in
// the raftnode snapshot-stall bench); "blocks=24576" (1,024 events of 24
// blocks) touches every shard. Events refresh stored chains (by a replica
// that holds them) with a newer last_seen, so every block named changes
// and the index does not grow between iterations. Reports the
// call's wall time (ns/op), its thread CPU time (cpu-ns/op) and the
// process CPU time of the call (proc-cpu-ns/op: also the GC work and page
// faults it causes on other threads).
func BenchmarkViewFirstApply(b *testing.B) { benchFirstApply(b, true) }

// benchSeen is the last_seen of benchFirstApply's events: it grows across
// iterations and across the benchmark's runs (b.N = 1, then more), so
// every call refreshes every residency it names instead of replaying
// events the index already holds (a no-op the undo log never saves).
var benchSeen = t0 + 1_000_000

// BenchmarkApplyNoView is BenchmarkViewFirstApply without the View: the
// cost of the same ApplyEvents call when no snapshot is open (the floor
// the first write after a View is compared with).
func BenchmarkApplyNoView(b *testing.B) { benchFirstApply(b, false) }

func benchFirstApply(b *testing.B, view bool) {
	for _, shape := range []struct{ events, per int }{{64, 4}, {1024, 24}} {
		b.Run(fmt.Sprintf("blocks=%d", shape.events*shape.per), func(b *testing.B) {
			forSizes(b, func(b *testing.B, bi *benchIndex) {
				counts := make([]uint32, benchChain)
				for i := range counts {
					counts[i] = 16
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var wall, cpu, proc time.Duration
				b.ResetTimer()
				for it := range b.N {
					b.StopTimer()
					evs := make([]BlockEvent, shape.events)
					for e := range evs {
						k := (it*shape.events + e) * 7919 % len(bi.chains)
						evs[e] = storeEvent(bi.chainRep[k], bi.chains[k][:shape.per], counts, benchSeen)
					}
					benchSeen++
					runtime.GC()
					var v *View
					if view {
						v = bi.ix.View()
					}
					c0, _ := threadCPU()
					p0, _ := processCPU()
					st := time.Now()
					b.StartTimer()
					bi.ix.ApplyEvents(evs)
					b.StopTimer()
					wall += time.Since(st)
					c1, _ := threadCPU()
					p1, _ := processCPU()
					cpu += c1 - c0
					proc += p1 - p0
					if v != nil {
						v.Release()
					}
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(proc.Nanoseconds())/float64(b.N), "proc-cpu-ns/op")
				b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N)/1e6, "ms/apply")
			})
		})
	}
}

// BenchmarkExport is View.Blocks over the whole index with a callback that
// only reads the record (what snapshot.Write does before encoding);
// BenchmarkExportBuild feeds the records to a Builder (restore). CPU is the
// process's (the GC's work included).
func BenchmarkExport(b *testing.B) {
	forSizes(b, func(b *testing.B, bi *benchIndex) { benchExport(b, bi, false) })
}

func BenchmarkExportBuild(b *testing.B) {
	forSizes(b, func(b *testing.B, bi *benchIndex) { benchExport(b, bi, true) })
}

func benchExport(b *testing.B, bi *benchIndex, build bool) {
	b.ReportAllocs()
	var proc time.Duration
	for range b.N {
		b.StopTimer()
		runtime.GC()
		v := bi.ix.View()
		p0, _ := processCPU()
		b.StartTimer()
		var n int
		var err error
		if build {
			bl := NewBuilder(v.Policy())
			err = v.Blocks(bl.AddBlock)
			if got := bl.Build(); err == nil && got.Digest() != v.Digest() {
				b.Fatal("rebuilt digest differs")
			}
		} else {
			err = v.Blocks(func(r BlockRecord) error { n += len(r.Residents); return nil })
		}
		b.StopTimer()
		p1, _ := processCPU()
		proc += p1 - p0
		v.Release()
		if err != nil {
			b.Fatal(err)
		}
		if want := v.Sizes().Residencies; !build && n != want {
			b.Fatalf("exported %d residencies, want %d", n, want)
		}
	}
	b.ReportMetric(float64(proc.Nanoseconds())/float64(b.N), "proc-cpu-ns/op")
}
