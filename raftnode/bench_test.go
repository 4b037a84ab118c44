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
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	t.Logf("machine: %d CPUs, load average %s; first touch of fresh memory: %s", runtimeNumCPU(), loadAvg(), firstTouchCost())
}

// envInt reads a positive integer knob (RAFTNODE_BENCH_WORKERS, …).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runQueueWait sums, over the process's threads, the time they were
// runnable but waiting for a CPU (/proc/self/task/*/schedstat, field 2):
// on a shared machine it tells CPU starvation apart from waiting on I/O
// or on the protocol. Threads that exited are not counted.
func runQueueWait() time.Duration {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sum += time.Duration(v)
			}
		}
	}
	return sum
}

// cpuTime is the process's user+system CPU time so far. The machine is
// shared, so rates are also reported per CPU-second used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchEvents: one ingest call = eventsPerCall STORED events of 4 blocks.
const (
	eventsPerCall = 64
	blocksPerEv   = 4
)

// benchDuration is the measured window (RAFTNODE_BENCH_SECONDS, default
// 5). benchWarmup (RAFTNODE_BENCH_WARMUP_SECONDS, default 0) runs the
// same load first without counting it: the process's heap grows to its
// working size then, and each page it touches for the first time costs
// ~10 µs on this machine's VM (BENCHMARKS.md, Round 6), which a node
// that has run for a while no longer pays.
var (
	benchDuration = time.Duration(envInt("RAFTNODE_BENCH_SECONDS", 5)) * time.Second
	benchWarmup   = time.Duration(envInt("RAFTNODE_BENCH_WARMUP_SECONDS", 0)) * time.Second
)

// minorFaults is the process's minor page faults so far
// (/proc/self/stat field 10): anonymous memory touched for the first time
// and file pages (bbolt's mmap) mapped in.
func minorFaults() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields count from ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 8 {
		return 0
	}
	v, _ := strconv.ParseInt(f[7], 10, 64)
	return v
}

// benchWorkers: concurrent Ingest callers on the leader (default 256;
// RAFTNODE_BENCH_WORKERS overrides). By Little's law the offered load caps
// throughput at workers × eventsPerCall / commit latency, so too few
// callers measure the latency, not the throughput, of the write path.
var benchWorkers = envInt("RAFTNODE_BENCH_WORKERS", 256)

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
	return benchCallInto(nil, nil, w, k)
}

// benchCallInto builds call k of worker w in evs and hs (reused by the
// caller: Ingest does not keep them), so the load generator's own
// allocations stay out of the process CPU the bench reports.
func benchCallInto(evs []index.BlockEvent, hs []uint64, w, k int) []index.BlockEvent {
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
		if benchChurn && e >= eventsPerCall/2 && k >= churnLag {
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

// RAFTNODE_BENCH_CHURN=1: the steady state of a fleet whose caches are
// full: once a worker has made churnLag calls, half of each call's events
// are REMOVED of blocks it stored churnLag calls before, so the index
// holds a constant ~256 × churnLag × 32 × 4 blocks instead of growing.
var benchChurn = os.Getenv("RAFTNODE_BENCH_CHURN") != ""

const churnLag = 16

func TestBench_IngestThroughputAndCommitLatency(t *testing.T) {
	benchOn(t)
	// RAFTNODE_BENCH_NODES=1 measures one voter alone (both cores for one
	// node's append and apply): a node's own ceiling, which a 3-node
	// cluster on 3 machines approaches (each node there has its own CPU).
	nodes := envInt("RAFTNODE_BENCH_NODES", 3)
	c := clustertest.New(t, nodes, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		p := policy.Default()
		p.MaxResidencies = 1 << 32
		cfg.Policy = p
		cfg.SnapshotThreshold = 1 << 20
		cfg.SnapshotInterval = time.Hour
		cfg.SnapshotLogBytes = -1 // the ingest path only; snapshots have their own bench
		cfg.ApplyWorkers = envInt("RAFTNODE_BENCH_APPLY_WORKERS", 0)
		if v := envInt("RAFTNODE_BENCH_ENTRY_BYTES", 0); v > 0 {
			cfg.GroupCommitMaxBytes = v
		}
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	// pre-encode nothing: the caller path (encode, group commit, raft,
	// fsync, replicate, apply on the leader) is what is measured
	var events atomic.Int64
	var measuring atomic.Bool
	measuring.Store(benchWarmup == 0)
	var mu sync.Mutex
	var lat []time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), benchWarmup+benchDuration)
	defer cancel()
	var wg sync.WaitGroup
	term0 := c.Nodes[l].Status().Term
	cpu0, rq0, flt0 := cpuTime(), runQueueWait(), minorFaults()
	nm0 := nodeMetrics(c)
	start := time.Now()
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var my []time.Duration
			evs := make([]index.BlockEvent, eventsPerCall)
			hs := make([]uint64, eventsPerCall*blocksPerEv)
			for k := 0; ctx.Err() == nil; k++ {
				evs = benchCallInto(evs, hs, w, k)
				t0 := time.Now()
				if _, err := c.Nodes[l].Ingest(context.Background(), "", evs); err != nil {
					t.Error(err)
					return
				}
				if measuring.Load() {
					my = append(my, time.Since(t0))
					events.Add(eventsPerCall)
				}
			}
			mu.Lock()
			lat = append(lat, my...)
			mu.Unlock()
		}()
	}
	if benchWarmup > 0 {
		time.Sleep(benchWarmup)
		cpu0, rq0, flt0 = cpuTime(), runQueueWait(), minorFaults()
		nm0 = nodeMetrics(c)
		start = time.Now()
		measuring.Store(true)
		t.Logf("cluster: %v of warm-up done, measuring %v", benchWarmup, benchDuration)
	}
	// The callers are running: a profiling failure is reported, not fatal.
	stopProfile := profileWindow(t)
	wg.Wait()
	stopProfile()
	el := time.Since(start)
	cpu, rq, flt := cpuTime()-cpu0, runQueueWait()-rq0, minorFaults()-flt0
	if st := c.Nodes[l].Status(); st.Term != term0 || st.State != "Leader" {
		// on a starved machine FastTiming elections can fire; entries
		// and calls/entry below then cover only this node's terms
		t.Logf("cluster: leadership changed during the run (term %d → %d, node %s now %s, %d retries)",
			term0, st.Term, c.Nodes[l].ID, st.State, c.Nodes[l].Metrics().Retries)
	}
	if len(lat) == 0 {
		t.Fatal("no call completed in the measured window")
	}
	slices.Sort(lat)
	// Entry and append counts of the measured window only.
	nm := nodeMetrics(c)
	for i := range nm {
		nm[i].Entries -= nm0[i].Entries
		nm[i].EntryCommands -= nm0[i].EntryCommands
		nm[i].LogAppends -= nm0[i].LogAppends
		nm[i].LogAppendEntries -= nm0[i].LogAppendEntries
	}
	m := nm[l]
	rate := float64(events.Load()) / el.Seconds()
	entryBytes := approxEntryBytes(t, int(m.EntryCommands/max(m.Entries, 1)), c.Nodes[l].Status().WriteFormat)
	t.Logf("cluster (%d nodes): %d events in %v = %.0f block events/s (%d blocks each); %d entries, %.1f calls/entry; commit latency p50 %v p99 %v",
		nodes, events.Load(), el.Round(time.Millisecond), rate, blocksPerEv, m.Entries, float64(m.EntryCommands)/float64(max(m.Entries, 1)),
		lat[len(lat)/2], lat[len(lat)*99/100])
	for i, nd := range c.Nodes {
		if nm[i].LogAppends > 0 {
			t.Logf("cluster: node %s (%s): %d log appends, %.1f entries per append (bbolt transaction)",
				nd.ID, nd.Status().State, nm[i].LogAppends, float64(nm[i].LogAppendEntries)/float64(nm[i].LogAppends))
		}
	}
	t.Logf("cluster: %d callers; process CPU %.2f s = %.2f cores busy of %d; threads runnable but waiting for a CPU %.2f s; %.0f block events per CPU-second (all 3 nodes apply every event in this process); load %s",
		benchWorkers, cpu.Seconds(), cpu.Seconds()/el.Seconds(), runtimeNumCPU(), rq.Seconds(), float64(events.Load())/cpu.Seconds(), loadAvg())
	t.Logf("cluster: %d minor page faults in the measured window (~%.0f MiB of memory touched for the first time or of file pages mapped)",
		flt, float64(flt)*float64(os.Getpagesize())/(1<<20))

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

// TestBench_ApplyCeiling measures what the ingest benchmark's nodes do
// without Raft: RAFTNODE_BENCH_NODES FSMs (default 3) in this process,
// each applying the same sealed format-2 entries (built as the leader's
// group commit builds them, ceilingCallsPerEntry calls each) from its own
// goroutine, two entries per ApplyBatch as raft hands them over. No log
// store, no fsync, no transport, no commit wait: the rate is the most
// the cluster bench could reach on this machine with the apply it has.
// The load is the steady state of TestBench_IngestThroughputAndCommitLatency
// with RAFTNODE_BENCH_CHURN=1: warm-up rounds fill the index to its
// steady size, then RAFTNODE_BENCH_CEILING_ROUNDS rounds (default 100) of
// one call per worker are measured.
func TestBench_ApplyCeiling(t *testing.T) {
	benchOn(t)
	if !benchChurn {
		t.Skip("set RAFTNODE_BENCH_CHURN=1 too: the ceiling is measured in the steady state")
	}
	nodes := envInt("RAFTNODE_BENCH_NODES", 3)
	workers := envInt("RAFTNODE_BENCH_APPLY_WORKERS", min(runtime.GOMAXPROCS(0), raftnode.MaxApplyWorkers))
	const warmRounds = 4 * churnLag
	rounds := envInt("RAFTNODE_BENCH_CEILING_ROUNDS", 100)

	// Entries of ceilingCallsPerEntry calls, in the order 256 callers
	// would reach the leader: round k holds call k of every worker.
	var entries [][]byte
	var body []byte
	calls := 0
	evs := make([]index.BlockEvent, eventsPerCall)
	hs := make([]uint64, eventsPerCall*blocksPerEv)
	flush := func() {
		if calls > 0 {
			entries = append(entries, fsm.SealEntry(nil, body))
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
				body = fsm.NewEntryFormat(body, fsm.EntryFormatPacked)
			}
			cmd, err := fsm.MarshalIngestPacked(fmt.Sprintf("req-%d-%d", w, k), benchCallInto(evs, hs, w, k))
			if err != nil {
				t.Fatal(err)
			}
			body = fsm.AppendCommand(body, cmd)
			if calls++; calls == ceilingCallsPerEntry {
				flush()
			}
		}
	}
	flush()
	measuredEvents := int64(rounds * benchWorkers * eventsPerCall)

	p := policy.Default()
	p.MaxResidencies = 1 << 32
	fsms := make([]*fsm.FSM, nodes)
	for i := range fsms {
		fsms[i] = fsm.New(p, fsm.Options{TmpDir: t.TempDir(), ApplyWorkers: workers})
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
					t.Errorf("ApplyBatch result %T, want *fsm.EntryResult", r)
					return
				}
				for _, res := range er.Results {
					if res.Err != nil || res.Duplicate {
						t.Errorf("entry %d: err %v, duplicate %v", er.Index, res.Err, res.Duplicate)
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
	cpu0, flt0 := cpuTime(), minorFaults()
	stopProfile := profileWindow(t)
	start := time.Now()
	for _, f := range fsms {
		wg.Add(1)
		go func() { defer wg.Done(); apply(f, measuredFrom, len(entries)) }()
	}
	wg.Wait()
	stopProfile()
	el := time.Since(start)
	cpu, flt := cpuTime()-cpu0, minorFaults()-flt0
	d0 := fsms[0].Index().Digest()
	for i, f := range fsms[1:] {
		if d := f.Index().Digest(); d != d0 {
			t.Errorf("FSM %d digest %016x, FSM 0 %016x", i+1, d, d0)
		}
	}
	sz := fsms[0].Index().Sizes()
	t.Logf("apply ceiling (%d FSMs, %d apply workers each, no Raft/log store/transport): %d events in %v = %.0f block events/s (%d blocks each); process CPU %.2f s = %.2f cores busy of %d; %.0f block events per CPU-second; %d minor page faults; index %d residencies per FSM; %d entries of %d calls; load %s",
		nodes, workers, measuredEvents, el.Round(time.Millisecond), float64(measuredEvents)/el.Seconds(), blocksPerEv,
		cpu.Seconds(), cpu.Seconds()/el.Seconds(), runtimeNumCPU(), float64(measuredEvents)/cpu.Seconds(), flt,
		sz.Residencies, len(entries)-measuredFrom, ceilingCallsPerEntry, loadAvg())
}

// ceilingCallsPerEntry is about what the ingest benchmark's leader packs
// into one log entry (it prints "calls/entry": 47–56 here).
const ceilingCallsPerEntry = 50

// profileWindow starts a CPU profile into RAFTNODE_BENCH_CPUPROFILE (if
// set) and returns what stops it: the measured window only, where
// -test.cpuprofile would include the warm-up. A failure is reported with
// t.Errorf (load goroutines may be running), and the returned func is
// then a no-op.
func profileWindow(t *testing.T) func() {
	path := os.Getenv("RAFTNODE_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("RAFTNODE_BENCH_CPUPROFILE: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		t.Errorf("RAFTNODE_BENCH_CPUPROFILE: %v (is -test.cpuprofile set too?)", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// nodeMetrics is every node's counters now, in c.Nodes order.
func nodeMetrics(c *clustertest.Cluster) []raftnode.Metrics {
	out := make([]raftnode.Metrics, len(c.Nodes))
	for i, nd := range c.Nodes {
		out[i] = nd.Metrics()
	}
	return out
}

// approxEntryBytes is an entry of calls bench calls in the format the
// cluster wrote (2 = packed ingest commands).
func approxEntryBytes(t *testing.T, calls int, format uint32) []byte {
	calls = max(calls, 1)
	buf := fsm.NewEntryFormat(nil, format)
	marshal := fsm.MarshalIngest
	if format >= fsm.EntryFormatPacked {
		marshal = fsm.MarshalIngestPacked
	}
	t.Logf("cluster: wrote log entry format %d", format)
	for i := 0; i < calls; i++ {
		b, err := marshal(fmt.Sprint("req-", i), benchCall(i, i))
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
	// The gap is split into time inside f.Apply (the writer lock, the
	// index's copy-on-write of shards the view pins) and time outside it
	// (sleep overshoot, waiting for a CPU, GC stop-the-world), and the
	// first Apply after Snapshot (the one that meets every pinned shard
	// first) is reported on its own.
	stop := make(chan struct{})
	var maxGap, maxInApply, firstAfter atomic.Int64
	var snapTaken atomic.Bool
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
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	maxGap.Store(0)
	maxInApply.Store(0)
	var gc0 debug.GCStats
	debug.ReadGCStats(&gc0)
	win0 := time.Now()
	t0 := time.Now()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snapTaken.Store(true)
	snapCall := time.Since(t0)
	path := filepath.Join(t.TempDir(), "snap.bin")
	out, _ := os.Create(path)
	c1, q1 := cpuTime(), runQueueWait()
	t1 := time.Now()
	if err := s.Persist(fileSink{out}); err != nil {
		t.Fatal(err)
	}
	persist := time.Since(t1)
	persistCPU, persistRQ := cpuTime()-c1, runQueueWait()-q1
	s.Release()
	time.Sleep(20 * time.Millisecond)
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
	t.Logf("FSM.Snapshot() %v; longest Apply stall while snapshotting %v (longest time inside one Apply %v; first Apply after the snapshot %v; %d GCs, longest STW pause %v); Persist %v; file %.1f MiB",
		snapCall, time.Duration(maxGap.Load()), time.Duration(maxInApply.Load()), time.Duration(firstAfter.Load()),
		gc1.NumGC-gc0.NumGC, maxPause, persist.Round(time.Millisecond), float64(fi.Size())/(1<<20))
	t.Logf("during Persist (the applier above keeps running): process CPU %.2f s, threads waiting for a CPU %.2f s; load %s",
		persistCPU.Seconds(), persistRQ.Seconds(), loadAvg())

	g := fsm.New(policy.Default(), fsm.Options{TmpDir: t.TempDir()})
	in, _ := os.Open(path)
	c2, q2 := cpuTime(), runQueueWait()
	t2 := time.Now()
	if err := g.Restore(in); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restore %v (%d residencies); process CPU %.2f s, threads waiting for a CPU %.2f s; load %s",
		time.Since(t2).Round(time.Millisecond), g.Index().Sizes().Residencies,
		(cpuTime() - c2).Seconds(), (runQueueWait() - q2).Seconds(), loadAvg())
	var _ io.Reader = in
}

func runtimeNumCPU() int { return runtime.NumCPU() }
