package raftnode_test

// Benchmarks for BENCHMARKS.md. The cluster and snapshot benchmarks start
// real nodes or build a 10 M residency index, so run them on purpose:
//
//	go test -run '^$' -bench 'ClusterIngest|ApplyCeiling|LogStoreAppend' -benchtime 5s ./raftnode/
//	go test -run '^$' -bench Snapshot10M -benchtime 1x -timeout 30m ./raftnode/
//
// -cpuprofile profiles them; the custom metrics (block-events/s, commit
// latency percentiles, calls per entry, events per CPU-second) are what
// BENCHMARKS.md quotes.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// benchMachine logs what the figures depend on: CPUs, load and what a
// first touch of fresh memory costs here.
func benchMachine(b *testing.B) {
	b.Logf("machine: %d CPUs, load average %s; first touch of fresh memory: %s", runtime.NumCPU(), loadAvg(), firstTouchCost())
}

// benchEvents: one ingest call = eventsPerCall STORED events of 4 blocks.
const (
	eventsPerCall = 64
	blocksPerEv   = 4
)

// benchWorkers: concurrent Ingest callers on the leader. By Little's law
// the offered load caps throughput at workers × eventsPerCall / commit
// latency, so too few callers measure the latency, not the throughput,
// of the write path.
const benchWorkers = 256

// The bench's events look like a vLLM fleet's: block hashes are random
// 64-bit values (a content hash), replica ids and partition strings have
// production lengths. Short ids and small hashes would understate every
// byte-proportional cost (log store, transport, decoding).
var (
	benchReplicaIDs = func() (ids [16]string) {
		for i := range ids {
			ids[i] = fmt.Sprintf("vllm-decode-%d.vllm.svc:8000", i)
		}
		return ids
	}()
	benchCounts = []uint32{16, 16, 16, 16}
	benchPart   = index.Partition{Scheme: "vllm-sha256-cbor-64", Model: "meta-llama/Llama-3.1-8B-Instruct", Tenant: "tenant-0042"}
)

// splitmix64 spreads a counter over 64 bits like a content hash.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func benchCall(w, k int) []index.BlockEvent {
	return benchCallInto(nil, nil, w, k, false)
}

// benchCallInto builds call k of worker w in evs and hs (with churn,
// see ingestLoad) (reused by the
// caller: Ingest does not keep them), so the load generator's own
// allocations stay out of the process CPU the bench reports.
func benchCallInto(evs []index.BlockEvent, hs []uint64, w, k int, churn bool) []index.BlockEvent {
	if len(evs) < eventsPerCall {
		evs = make([]index.BlockEvent, eventsPerCall)
	}
	if len(hs) < eventsPerCall*blocksPerEv {
		hs = make([]uint64, eventsPerCall*blocksPerEv)
	}
	now := time.Now().UnixMilli()
	for e := range evs[:eventsPerCall] {
		h := hs[e*blocksPerEv : (e+1)*blocksPerEv : (e+1)*blocksPerEv]
		kind, kk, ee := index.Stored, k, e
		if churn && e >= eventsPerCall/2 && k >= churnLag {
			// The engine evicts what this worker stored churnLag calls
			// ago: the index stops growing.
			kind, kk, ee = index.Removed, k-churnLag, e-eventsPerCall/2
		}
		for i := range h {
			h[i] = splitmix64(uint64(w)<<40 | uint64(kk)<<16 | uint64(ee)<<4 | uint64(i))
		}
		evs[e] = index.BlockEvent{Kind: kind, ReplicaID: benchReplicaIDs[w%16], Partition: benchPart,
			BlockHashes: h, BlockTokenCounts: benchCounts, ObservedAtMs: now}
	}
	return evs[:eventsPerCall]
}

// churnLag: with churn, once a worker has made churnLag calls, half of
// each call's events are REMOVED of blocks it stored churnLag calls
// before, so the index holds a constant ~256 × churnLag × 32 × 4 blocks
// instead of growing: the steady state of a fleet whose caches are full.
const churnLag = 16

// BenchmarkClusterIngest measures the write path end to end: benchWorkers
// callers on the leader (encode, group commit, raft, fsync, replicate,
// apply on the leader), one b.N iteration per ingest call of
// eventsPerCall events. Sub-benchmarks: a 3-node cluster; one voter alone
// (both cores for one node's append and apply: a node's own ceiling,
// which a 3-node cluster on 3 machines approaches); and the 3-node cluster
// in the churn steady state.
func BenchmarkClusterIngest(b *testing.B) {
	for _, bc := range []struct {
		name  string
		nodes int
		churn bool
	}{{"nodes=3", 3, false}, {"nodes=1", 1, false}, {"nodes=3/churn", 3, true}} {
		b.Run(bc.name, func(b *testing.B) { benchClusterIngest(b, bc.nodes, bc.churn) })
	}
}

func benchClusterIngest(b *testing.B, nodes int, churn bool) {
	benchMachine(b)
	c := clustertest.New(b, nodes, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		p := policy.Default()
		p.MaxResidencies = 1 << 32
		cfg.Policy = p
		cfg.SnapshotThreshold = 1 << 20
		cfg.SnapshotInterval = time.Hour
		cfg.SnapshotLogBytes = -1 // the ingest path only; snapshots have their own bench
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	var mu sync.Mutex
	var lat []time.Duration
	var calls atomic.Int64
	tokens := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var my []time.Duration
			evs := make([]index.BlockEvent, eventsPerCall)
			hs := make([]uint64, eventsPerCall*blocksPerEv)
			for k := 0; ; k++ {
				if _, ok := <-tokens; !ok {
					break
				}
				evs = benchCallInto(evs, hs, w, k, churn)
				t0 := time.Now()
				if _, err := c.Nodes[l].Ingest(context.Background(), "", evs); err != nil {
					b.Error(err)
					break
				}
				my = append(my, time.Since(t0))
				calls.Add(1)
			}
			mu.Lock()
			lat = append(lat, my...)
			mu.Unlock()
		}()
	}
	term0 := c.Nodes[l].Status().Term
	nm0 := nodeMetrics(c)
	cpu0, rq0, flt0 := cpuTime(), runQueueWait(), minorFaults()
	start := time.Now()
	for b.Loop() {
		tokens <- struct{}{}
	}
	close(tokens)
	wg.Wait()
	el := time.Since(start)
	cpu, rq, flt := cpuTime()-cpu0, runQueueWait()-rq0, minorFaults()-flt0
	if st := c.Nodes[l].Status(); st.Term != term0 || st.State != "Leader" {
		// on a starved machine FastTiming elections can fire; entries
		// and calls/entry below then cover only this node's terms
		b.Logf("leadership changed during the run (term %d → %d, node %s now %s, %d retries)",
			term0, st.Term, c.Nodes[l].ID, st.State, c.Nodes[l].Metrics().Retries)
	}
	if len(lat) == 0 {
		b.Fatal("no call completed")
	}
	slices.Sort(lat)
	nm := nodeMetrics(c)
	m := nm[l]
	entries, cmds := m.Entries-nm0[l].Entries, m.EntryCommands-nm0[l].EntryCommands
	events := float64(calls.Load() * eventsPerCall)
	b.ReportMetric(events/el.Seconds(), "block-events/s")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-commit-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-commit-ns")
	b.ReportMetric(float64(cmds)/float64(max(entries, 1)), "calls/entry")
	b.ReportMetric(events/cpu.Seconds(), "events/cpu-s")
	for i, nd := range c.Nodes {
		if a := nm[i].LogAppends - nm0[i].LogAppends; a > 0 {
			b.Logf("node %s (%s): %d log appends, %.1f entries per append (bbolt transaction)",
				nd.ID, nd.Status().State, a, float64(nm[i].LogAppendEntries-nm0[i].LogAppendEntries)/float64(a))
		}
	}
	b.Logf("%d nodes, %d callers, %d calls in %v: process CPU %.2f s = %.2f cores busy of %d; threads runnable but waiting for a CPU %.2f s; %d minor page faults (~%.0f MiB touched for the first time or mapped); load %s",
		nodes, benchWorkers, calls.Load(), el.Round(time.Millisecond), cpu.Seconds(), cpu.Seconds()/el.Seconds(), runtime.NumCPU(),
		rq.Seconds(), flt, float64(flt)*float64(os.Getpagesize())/(1<<20), loadAvg())
}

// BenchmarkLogStoreAppend is the cluster benchmark's baseline: entries of
// the shape its leader writes (ceilingCallsPerEntry calls each) appended
// to one raft-boltdb store with the same bbolt options, fsync on, 16
// entries per StoreLogs (raft's observed entries per append are fewer).
// One b.N iteration is one StoreLogs.
func BenchmarkLogStoreAppend(b *testing.B) {
	st, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "b.db"),
		BoltOptions: &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	entry := benchEntry(b, ceilingCallsPerEntry)
	var idx uint64
	for b.Loop() {
		logs := make([]*raft.Log, 0, 16)
		for i := 0; i < 16; i++ {
			idx++
			logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: entry})
		}
		if err := st.StoreLogs(logs); err != nil {
			b.Fatal(err)
		}
	}
	events := float64(idx) * ceilingCallsPerEntry * eventsPerCall
	b.ReportMetric(events/b.Elapsed().Seconds(), "block-events/s")
	b.ReportMetric(float64(len(entry)), "entry-bytes")
}

// BenchmarkApplyCeiling measures what the ingest benchmark's nodes do
// without Raft: 3 FSMs in this process, each applying the same sealed
// entries (built as the leader's group commit builds them,
// ceilingCallsPerEntry calls each) from its own goroutine, two entries per
// ApplyBatch as raft hands them over. No log store, no fsync, no
// transport, no commit wait: the rate is the most the cluster benchmark
// could reach on this machine with the apply it has. The load is the churn
// steady state: warm-up rounds fill the index to its steady size, then
// b.N rounds of one call per worker are measured.
func BenchmarkApplyCeiling(b *testing.B) {
	const nodes = 3
	workers := min(runtime.GOMAXPROCS(0), raftnode.MaxApplyWorkers)
	const warmRounds = 4 * churnLag
	rounds := b.N

	// Entries of ceilingCallsPerEntry calls, in the order 256 callers
	// would reach the leader: round k holds call k of every worker.
	var entries [][]byte
	var body []byte
	calls := 0
	evs := make([]index.BlockEvent, eventsPerCall)
	hs := make([]uint64, eventsPerCall*blocksPerEv)
	flush := func() {
		if calls > 0 {
			entries = append(entries, command.SealEntry(nil, body))
			calls = 0
		}
	}
	measuredFrom := 0
	for k := 0; k < warmRounds+rounds; k++ {
		if k == warmRounds {
			flush()
			measuredFrom = len(entries)
		}
		for w := 0; w < benchWorkers; w++ {
			if calls == 0 {
				body = command.NewEntry(body)
			}
			cmd, err := command.MarshalIngest(fmt.Sprintf("req-%d-%d", w, k), benchCallInto(evs, hs, w, k, true))
			if err != nil {
				b.Fatal(err)
			}
			body = command.AppendCommand(body, cmd)
			if calls++; calls == ceilingCallsPerEntry {
				flush()
			}
		}
	}
	flush()
	measuredEvents := float64(rounds * benchWorkers * eventsPerCall)

	p := policy.Default()
	p.MaxResidencies = 1 << 32
	fsms := make([]*fsm.FSM, nodes)
	for i := range fsms {
		fsms[i] = fsm.New(p, fsm.Options{TmpDir: b.TempDir(), ApplyWorkers: workers})
	}
	apply := func(f *fsm.FSM, from, to int) {
		for i := from; i < to; i += 2 {
			j := min(i+2, to)
			logs := make([]*raft.Log, 0, 2)
			for x := i; x < j; x++ {
				logs = append(logs, &raft.Log{Index: uint64(x + 1), Term: 1, Type: raft.LogCommand, Data: entries[x]})
			}
			for _, r := range f.ApplyBatch(logs) {
				er, ok := r.(*fsm.EntryResult)
				if !ok {
					b.Errorf("ApplyBatch result %T, want *fsm.EntryResult", r)
					return
				}
				for _, res := range er.Results {
					if res.Err != nil || res.Duplicate {
						b.Errorf("entry %d: err %v, duplicate %v", er.Index, res.Err, res.Duplicate)
						return
					}
				}
			}
		}
	}
	var wg sync.WaitGroup
	for _, f := range fsms {
		wg.Add(1)
		go func() { defer wg.Done(); apply(f, 0, measuredFrom) }()
	}
	wg.Wait()
	runtime.GC()
	cpu0 := cpuTime()
	b.ResetTimer()
	for _, f := range fsms {
		wg.Add(1)
		go func() { defer wg.Done(); apply(f, measuredFrom, len(entries)) }()
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	d0 := fsms[0].Index().Digest()
	for i, f := range fsms[1:] {
		if d := f.Index().Digest(); d != d0 {
			b.Errorf("FSM %d digest %016x, FSM 0 %016x", i+1, d, d0)
		}
	}
	b.ReportMetric(measuredEvents/b.Elapsed().Seconds(), "block-events/s")
	b.ReportMetric(measuredEvents/cpu.Seconds(), "events/cpu-s")
}

// ceilingCallsPerEntry is about what the ingest benchmark's leader packs
// into one log entry (it reports calls/entry: 47–56 here).
const ceilingCallsPerEntry = 50

// nodeMetrics is every node's counters now, in c.Nodes order.
func nodeMetrics(c *clustertest.Cluster) []raftnode.Metrics {
	out := make([]raftnode.Metrics, len(c.Nodes))
	for i, nd := range c.Nodes {
		out[i] = nd.Metrics()
	}
	return out
}

// benchEntry is an entry of calls bench calls, as the leader writes it.
func benchEntry(b *testing.B, calls int) []byte {
	buf := command.NewEntry(nil)
	for i := 0; i < calls; i++ {
		c, err := command.MarshalIngest(fmt.Sprint("req-", i), benchCall(i, i))
		if err != nil {
			b.Fatal(err)
		}
		buf = command.AppendCommand(buf, c)
	}
	return buf
}
