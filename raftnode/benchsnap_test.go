package raftnode_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// fileSink is a raft.SnapshotSink over a file.
type fileSink struct{ *os.File }

func (fileSink) ID() string                    { return "bench" }
func (fileSink) Cancel() error                 { return nil }
func (s fileSink) Close() error                { return s.File.Close() }
func (s fileSink) Write(b []byte) (int, error) { return s.File.Write(b) }

// BenchmarkSnapshot10MResidencies builds an FSM of 10 M residencies once,
// then per iteration takes a snapshot while a writer applies small entries
// (the longest gap between its applies is the stall snapshotting causes),
// persists it to a file and restores it into a fresh FSM. Run it with
// -benchtime 1x: the build alone takes minutes.
func BenchmarkSnapshot10MResidencies(b *testing.B) {
	benchMachine(b)
	p := policy.Default()
	p.MaxResidencies = 1 << 32
	f := fsm.New(p, fsm.Options{TmpDir: b.TempDir()})
	const replicas = 4
	const chain = 64
	target := 10_000_000
	chains := target / replicas / chain
	var idx uint64
	now := time.Now().UnixMilli()
	buildStart := time.Now()
	for c0 := 0; c0 < chains; c0 += 2000 {
		var evs []index.BlockEvent
		for c := c0; c < min(c0+2000, chains); c++ {
			hs := make([]uint64, chain)
			tc := make([]uint32, chain)
			for i := range hs {
				hs[i] = uint64(c)<<8 | uint64(i)
				tc[i] = 16
			}
			for r := 0; r < replicas; r++ {
				evs = append(evs, index.BlockEvent{Kind: index.Stored, ReplicaID: fmt.Sprintf("replica-%d", r), Partition: part,
					BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: now})
			}
		}
		data, _ := command.EncodeEntry(command.IngestCommand("", evs))
		idx++
		f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data})
	}
	sz := f.Index().Sizes()
	b.Logf("built %d residencies (%d blocks) in %v", sz.Residencies, sz.Blocks, time.Since(buildStart).Round(time.Millisecond))

	// Apply stall: a writer applies small entries continuously while the
	// snapshot is taken; the longest gap between applies is the stall.
	// The gap is split into time inside f.Apply (the writer lock, the
	// index's copy-on-write of shards the view pins) and time outside it
	// (sleep overshoot, waiting for a CPU, GC stop-the-world), and the
	// first Apply after Snapshot (the one that meets every pinned shard
	// first) is reported on its own.
	applyIdx := idx
	var lastStall, lastPersist, lastRestore time.Duration
	var lastSize int64
	for b.Loop() {
		stop := make(chan struct{})
		var maxGap, maxInApply, firstAfter atomic.Int64
		var snapTaken atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		small, _ := command.EncodeEntry(command.IngestCommand("", benchCall(1, 1)))
		go func() {
			defer wg.Done()
			last := time.Now()
			for {
				select {
				case <-stop:
					return
				default:
				}
				applyIdx++
				pinned := snapTaken.Load()
				a0 := time.Now()
				f.Apply(&raft.Log{Index: applyIdx, Term: 1, Type: raft.LogCommand, Data: small})
				now := time.Now()
				if d := int64(now.Sub(a0)); d > maxInApply.Load() {
					maxInApply.Store(d)
				}
				if pinned && firstAfter.Load() == 0 {
					firstAfter.Store(int64(now.Sub(a0)))
				}
				if g := now.Sub(last); int64(g) > maxGap.Load() {
					maxGap.Store(int64(g))
				}
				last = now
				time.Sleep(100 * time.Microsecond) // paces the writer whose gaps are measured
			}
		}()
		time.Sleep(50 * time.Millisecond) // the writer warms up before the measured window opens
		maxGap.Store(0)
		maxInApply.Store(0)
		var gc0 debug.GCStats
		debug.ReadGCStats(&gc0)
		win0 := time.Now()
		t0 := time.Now()
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		snapTaken.Store(true)
		snapCall := time.Since(t0)
		path := filepath.Join(b.TempDir(), "snap.bin")
		out, _ := os.Create(path)
		c1, q1 := cpuTime(), runQueueWait()
		t1 := time.Now()
		if err := s.Persist(fileSink{out}); err != nil {
			b.Fatal(err)
		}
		persist := time.Since(t1)
		persistCPU, persistRQ := cpuTime()-c1, runQueueWait()-q1
		s.Release()
		time.Sleep(20 * time.Millisecond) // the window stays open for the applies that follow the snapshot
		close(stop)
		wg.Wait()
		fi, _ := os.Stat(path)
		var gc1 debug.GCStats
		debug.ReadGCStats(&gc1)
		var maxPause time.Duration
		for i, p := range gc1.Pause {
			if i < len(gc1.PauseEnd) && gc1.PauseEnd[i].After(win0) && p > maxPause {
				maxPause = p
			}
		}
		b.Logf("FSM.Snapshot() %v; longest Apply stall while snapshotting %v (longest time inside one Apply %v; first Apply after the snapshot %v; %d GCs, longest STW pause %v); Persist %v; file %.1f MiB",
			snapCall, time.Duration(maxGap.Load()), time.Duration(maxInApply.Load()), time.Duration(firstAfter.Load()),
			gc1.NumGC-gc0.NumGC, maxPause, persist.Round(time.Millisecond), float64(fi.Size())/(1<<20))
		b.Logf("during Persist (the applier above keeps running): process CPU %.2f s, threads waiting for a CPU %.2f s; load %s",
			persistCPU.Seconds(), persistRQ.Seconds(), loadAvg())

		g := fsm.New(policy.Default(), fsm.Options{TmpDir: b.TempDir()})
		in, _ := os.Open(path)
		c2, q2 := cpuTime(), runQueueWait()
		t2 := time.Now()
		if err := g.Restore(in); err != nil {
			b.Fatal(err)
		}
		b.Logf("Restore %v (%d residencies); process CPU %.2f s, threads waiting for a CPU %.2f s; load %s",
			time.Since(t2).Round(time.Millisecond), g.Index().Sizes().Residencies,
			(cpuTime() - c2).Seconds(), (runQueueWait() - q2).Seconds(), loadAvg())
		in.Close()
		lastStall, lastPersist, lastRestore, lastSize = time.Duration(maxGap.Load()), persist, time.Since(t2), fi.Size()
	}
	b.ReportMetric(float64(lastStall.Nanoseconds()), "apply-stall-ns")
	b.ReportMetric(float64(lastPersist.Nanoseconds()), "persist-ns")
	b.ReportMetric(float64(lastRestore.Nanoseconds()), "restore-ns")
	b.ReportMetric(float64(lastSize)/(1<<20), "file-MiB")
}
