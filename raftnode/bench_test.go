package raftnode_test

// Benchmarks for BENCHMARKS.md. They are tests gated by an environment
// variable so `go test` stays fast:
//
//	RAFTNODE_BENCH=1 go test -run 'TestBench' -v -count=1 -timeout 20m ./raftnode/

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

func benchOn(t *testing.T) {
	if os.Getenv("RAFTNODE_BENCH") == "" {
		t.Skip("set RAFTNODE_BENCH=1")
	}
}

// benchEvents: one ingest call = eventsPerCall STORED events of 4 blocks.
const (
	eventsPerCall = 64
	blocksPerEv   = 4
	benchWorkers  = 64
	benchDuration = 5 * time.Second
)

func benchCall(w, k int) []index.BlockEvent {
	out := make([]index.BlockEvent, eventsPerCall)
	now := time.Now().UnixMilli()
	for e := range out {
		hs := make([]uint64, blocksPerEv)
		for i := range hs {
			hs[i] = uint64(w)<<40 | uint64(k)<<16 | uint64(e)<<4 | uint64(i)
		}
		out[e] = index.BlockEvent{Kind: index.Stored, ReplicaID: fmt.Sprintf("r%d", w%16), Partition: part,
			BlockHashes: hs, BlockTokenCounts: []uint32{16, 16, 16, 16}, ObservedAtMs: now}
	}
	return out
}

func TestBench_IngestThroughputAndCommitLatency(t *testing.T) {
	benchOn(t)
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		p := policy.Default()
		p.MaxResidencies = 1 << 32
		cfg.Policy = p
		cfg.SnapshotThreshold = 1 << 20
		cfg.SnapshotInterval = time.Hour
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	// pre-encode nothing: the caller path (encode, group commit, raft,
	// fsync, replicate, apply on the leader) is what is measured
	var events atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), benchDuration)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var my []time.Duration
			for k := 0; ctx.Err() == nil; k++ {
				evs := benchCall(w, k)
				t0 := time.Now()
				if _, err := c.Nodes[l].Ingest(context.Background(), "", evs); err != nil {
					t.Error(err)
					return
				}
				my = append(my, time.Since(t0))
				events.Add(eventsPerCall)
			}
			mu.Lock()
			lat = append(lat, my...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	slices.Sort(lat)
	m := c.Nodes[l].Metrics()
	rate := float64(events.Load()) / el.Seconds()
	entryBytes := approxEntryBytes(t, int(m.EntryCommands/max(m.Entries, 1)))
	t.Logf("cluster: %d events in %v = %.0f block events/s (%d blocks each); %d entries, %.1f calls/entry; commit latency p50 %v p99 %v",
		events.Load(), el.Round(time.Millisecond), rate, blocksPerEv, m.Entries, float64(m.EntryCommands)/float64(m.Entries),
		lat[len(lat)/2], lat[len(lat)*99/100])

	// Baseline: the same entry bytes appended to one raft-boltdb store
	// (same bbolt options, fsync on), 256 entries per StoreLogs like
	// raft's leader batches.
	dir := t.TempDir()
	st, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "b.db"),
		BoltOptions: &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	callsPerEntry := int(m.EntryCommands / max(m.Entries, 1))
	entry := entryBytes
	perEntryEvents := callsPerEntry * eventsPerCall
	var idx uint64
	var bEvents int64
	bStart := time.Now()
	for time.Since(bStart) < 3*time.Second {
		logs := make([]*raft.Log, 0, 16)
		for i := 0; i < 16; i++ { // raft's observed entries per append are few; 16 is generous
			idx++
			logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: entry})
		}
		if err := st.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		bEvents += int64(len(logs) * perEntryEvents)
	}
	bRate := float64(bEvents) / time.Since(bStart).Seconds()
	t.Logf("baseline: single-node batched bbolt append of the same entries (%d bytes, %d events each): %.0f block events/s; ratio cluster/baseline %.2f",
		len(entry), perEntryEvents, bRate, rate/bRate)
}

func approxEntryBytes(t *testing.T, calls int) []byte {
	calls = max(calls, 1)
	buf := fsm.NewEntry(nil)
	for i := 0; i < calls; i++ {
		b, err := fsm.MarshalCommand(fsm.IngestCommand(fmt.Sprint("req-", i), benchCall(i, i)))
		if err != nil {
			t.Fatal(err)
		}
		buf = fsm.AppendCommand(buf, b)
	}
	return buf
}

// fileSink is a raft.SnapshotSink over a file.
type fileSink struct{ *os.File }

func (fileSink) ID() string                    { return "bench" }
func (fileSink) Cancel() error                 { return nil }
func (s fileSink) Close() error                { return s.File.Close() }
func (s fileSink) Write(b []byte) (int, error) { return s.File.Write(b) }

func TestBench_Snapshot10MResidencies(t *testing.T) {
	benchOn(t)
	p := policy.Default()
	p.MaxResidencies = 1 << 32
	f := fsm.New(p, fsm.Options{TmpDir: t.TempDir()})
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
		data, _ := fsm.EncodeEntry(fsm.IngestCommand("", evs))
		idx++
		f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data})
	}
	sz := f.Index().Sizes()
	t.Logf("built %d residencies (%d blocks) in %v", sz.Residencies, sz.Blocks, time.Since(buildStart).Round(time.Millisecond))

	// Apply stall: a writer applies small entries continuously while the
	// snapshot is taken; the longest gap between applies is the stall.
	stop := make(chan struct{})
	var maxGap atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	small, _ := fsm.EncodeEntry(fsm.IngestCommand("", benchCall(1, 1)))
	applyIdx := idx
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
			f.Apply(&raft.Log{Index: applyIdx, Term: 1, Type: raft.LogCommand, Data: small})
			now := time.Now()
			if g := now.Sub(last); int64(g) > maxGap.Load() {
				maxGap.Store(int64(g))
			}
			last = now
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	maxGap.Store(0)
	t0 := time.Now()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snapCall := time.Since(t0)
	path := filepath.Join(t.TempDir(), "snap.bin")
	out, _ := os.Create(path)
	t1 := time.Now()
	if err := s.Persist(fileSink{out}); err != nil {
		t.Fatal(err)
	}
	persist := time.Since(t1)
	s.Release()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	fi, _ := os.Stat(path)
	t.Logf("FSM.Snapshot() %v; longest Apply stall while snapshotting %v; Persist %v; file %.1f MiB",
		snapCall, time.Duration(maxGap.Load()), persist.Round(time.Millisecond), float64(fi.Size())/(1<<20))

	g := fsm.New(policy.Default(), fsm.Options{TmpDir: t.TempDir()})
	in, _ := os.Open(path)
	t2 := time.Now()
	if err := g.Restore(in); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restore %v (%d residencies)", time.Since(t2).Round(time.Millisecond), g.Index().Sizes().Residencies)
	var _ io.Reader = in
}
