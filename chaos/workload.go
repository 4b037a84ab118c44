package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// Workload constants: the partition every write and lookup uses, and the
// chain shape (8 full blocks of 16 tokens: over minimumMatchedTokens).
const (
	scheme      = "vllm"
	model       = "chaos"
	tenant      = "t"
	blockSize   = 16
	chainTokens = 128
)

// WriteRec is one logical ingest write (one request id, retried by the
// SDK across nodes).
type WriteRec struct {
	Writer  int
	Seq     int
	ReqID   string
	Replica string
	// Base is the first token id of the write's unique chain.
	Base       uint32
	Start, End time.Time
	// Acked: the write returned success (it must never be lost).
	Acked bool
	// Index is the applied index the acknowledgment carried.
	Index uint64
	Err   string
}

// Tokens returns the write's chain.
func (w *WriteRec) Tokens() []uint32 { return chainAt(w.Base) }

func chainAt(base uint32) []uint32 {
	t := make([]uint32, chainTokens)
	for i := range t {
		t[i] = base + uint32(i)
	}
	return t
}

// LookupRec is one LookupRoute call of a reader.
type LookupRec struct {
	Node int
	At   time.Time
	Lat  time.Duration
	// Err: the call returned a gRPC error; Counted: the node was Up (same
	// generation) from before the call until after it, so the error
	// counts against the zero-error invariant.
	Err, Counted bool
	Stale        bool
	Msg          string
	// Reason is the answer's reason code ("" after an error).
	Reason string
	// Wrong: the node was Up (same generation) throughout the call and
	// answered fresh (not stale) from a state that includes the seeded
	// chain (applied index ≥ its index), yet not with a PREFIX_MATCH naming the
	// seeded chain's replica. The chain is committed before the readers
	// start and never expires during a run, so such an answer hides
	// acknowledged state; it fails the run.
	Wrong bool
	// OverBudget: the node answered the lookup budget's fail-open NO_HINT
	// (contract §5.7: lookupTimeoutMs spent before the state was read), a
	// delay, not a wrong read; counted apart.
	OverBudget bool
}

// Workload drives the load and records the history.
type Workload struct {
	c      *Cluster
	sdk    *client.Client
	runTag string
	// base policy (TTL long, maxStaleness short) every register Set keeps.
	base *pb.CachePolicy
	// initial register value: the policy a node holds before it applied
	// any SetPolicy (a fresh or just restarted node serves it).
	initial uint32

	// Writers, WritePause, Readers per node, RegSetters, RegGetters and
	// RegPause set the load (before Start).
	Writers, ReadersPerNode, RegSetters, RegGetters int
	WritePause, ReadPause, RegPause                 time.Duration

	mu      sync.Mutex
	writes  []*WriteRec
	lookups []LookupRec
	regOps  []RegOp
	regNext atomic.Uint32
	// direct numbers DirectWrite's chains.
	direct atomic.Uint32
	// leaderHint: index of the node the poller last saw as leader.
	leaderHint atomic.Int32

	mon    *Monitor
	stop   context.CancelFunc
	wg     sync.WaitGroup
	t0     time.Time
	seeded []uint32
	// seedIndex is the log index the seeded chain applied at: a node
	// answering from an earlier applied index has not applied it yet
	// (behind by moments, or catching up from a snapshot) and is not
	// wrong.
	seedIndex uint64
}

// NewWorkload prepares a workload against c: it sets the base policy
// (evictionTTL 168 h so nothing acknowledged expires during a long run,
// maxStaleness 2 s) and seeds the chain the readers look up.
func NewWorkload(ctx context.Context, c *Cluster, mon *Monitor) (*Workload, error) {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.GRPC)
	}
	sdk, err := client.New(client.Config{Addrs: addrs, WriteRetry: 30 * time.Second, WriteAttemptTimeout: 4 * time.Second})
	if err != nil {
		return nil, err
	}
	w := &Workload{c: c, sdk: sdk, mon: mon, runTag: fmt.Sprintf("%06x", rand.IntN(1<<24)),
		Writers: 4, ReadersPerNode: 1, RegSetters: 2, RegGetters: 3,
		WritePause: 40 * time.Millisecond, ReadPause: 5 * time.Millisecond, RegPause: 50 * time.Millisecond}
	w.leaderHint.Store(-1)
	var pol *pb.CachePolicy
	err = sdk.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
		var e error
		pol, e = ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
		return e
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: get policy: %w", err)
	}
	w.initial = pol.SloTightThresholdMs
	pol.EvictionTtlSeconds = 7 * 24 * 3600
	pol.MaxStalenessMs = 2000
	pol.SloTightThresholdMs = 0
	w.base = pol
	var set *pb.CachePolicy
	err = sdk.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
		var e error
		set, e = ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: pol})
		return e
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: set base policy: %w", err)
	}
	_ = set
	w.regNext.Store(1000)
	// The readers' chain, held by two replicas of their own.
	w.seeded = chainAt(4_000_000_000)
	seed, err := sdk.Ingest(ctx, &pb.IngestRequest{RequestId: "seed-" + w.runTag, Events: []*pb.BlockEvent{
		stored(seedReplica, w.seeded), stored("seed-b", chainAt(4_000_100_000)),
	}})
	if err != nil {
		return nil, fmt.Errorf("chaos: seed: %w", err)
	}
	w.seedIndex = seed.GetAppliedIndex()
	return w, nil
}

// Base returns the policy every register write starts from.
func (w *Workload) Base() *pb.CachePolicy { return w.base }

func stored(replica string, tokens []uint32) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: replica, HashScheme: scheme, ModelId: model,
		TenantId: tenant, TokenIds: tokens, BlockSize: blockSize}
}

// Start launches every worker.
func (w *Workload) Start(ctx context.Context) {
	ctx, w.stop = context.WithCancel(ctx)
	w.t0 = time.Now()
	for i := 0; i < w.Writers; i++ {
		w.wg.Add(1)
		go w.writer(ctx, i)
	}
	for _, n := range w.c.Nodes {
		for r := 0; r < w.ReadersPerNode; r++ {
			w.wg.Add(1)
			go w.reader(ctx, n)
		}
	}
	for i := 0; i < w.RegSetters; i++ {
		w.wg.Add(1)
		go w.regSetter(ctx, i)
	}
	for i := 0; i < w.RegGetters; i++ {
		w.wg.Add(1)
		go w.regGetter(ctx, w.RegSetters+i)
	}
}

// Stop stops the workers and waits for them.
func (w *Workload) Stop() {
	if w.stop != nil {
		w.stop()
	}
	w.wg.Wait()
}

// Close releases the SDK client.
func (w *Workload) Close() { w.sdk.Close() }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (w *Workload) writer(ctx context.Context, id int) {
	defer w.wg.Done()
	replica := fmt.Sprintf("r-w%d", id)
	for seq := 0; ctx.Err() == nil; seq++ {
		rec := &WriteRec{Writer: id, Seq: seq, ReqID: fmt.Sprintf("%s-w%d-%d", w.runTag, id, seq), Replica: replica,
			Base: uint32(id)*200_000_000 + uint32(seq)*256 + 1}
		rec.Start = time.Now()
		// The write's own context is not the run's: a write in flight when
		// the workload stops still finishes (and is recorded) normally.
		wctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		resp, err := w.sdk.Ingest(wctx, &pb.IngestRequest{RequestId: rec.ReqID, Events: []*pb.BlockEvent{stored(replica, rec.Tokens())}})
		cancel()
		rec.End = time.Now()
		if err == nil && resp.Accepted == 1 {
			rec.Acked, rec.Index = true, resp.AppliedIndex
		} else if err != nil {
			rec.Err = err.Error()
		} else {
			rec.Err = fmt.Sprintf("accepted %d rejected %v", resp.Accepted, resp.Rejected)
		}
		w.mu.Lock()
		w.writes = append(w.writes, rec)
		w.mu.Unlock()
		if !sleepCtx(ctx, w.WritePause) {
			return
		}
	}
}

func (w *Workload) reader(ctx context.Context, n *Node) {
	defer w.wg.Done()
	req := &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: tenant, TokenIds: w.seeded}
	for ctx.Err() == nil {
		if s, _ := n.State(); s != Up {
			if !sleepCtx(ctx, 20*time.Millisecond) {
				return
			}
			continue
		}
		rec, ok := readOnce(ctx, n, req, w.seedIndex)
		if !ok {
			return
		}
		w.mu.Lock()
		w.lookups = append(w.lookups, rec)
		w.mu.Unlock()
		if !sleepCtx(ctx, w.ReadPause) {
			return
		}
	}
}

// seedReplica is the replica holding the readers' chain.
const seedReplica = "seed-a"

// readOnce looks up the seeded chain (req) on n once and classifies the
// answer; ok is false when ctx ended during the call (nothing to record).
func readOnce(ctx context.Context, n *Node, req *pb.LookupRouteRequest, seedIndex uint64) (rec LookupRec, ok bool) {
	_, g0 := n.State()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	r, err := n.IC.LookupRoute(cctx, req)
	cancel()
	rec = LookupRec{Node: n.Index, At: start, Lat: time.Since(start)}
	if ctx.Err() != nil {
		return rec, false
	}
	s1, g1 := n.State()
	reachable := s1 == Up && g1 == g0
	if err != nil {
		rec.Err, rec.Counted, rec.Msg = true, reachable, err.Error()
		return rec, true
	}
	rec.Stale, rec.Reason = r.Stale, r.ReasonCode.String()
	rec.OverBudget = r.ReasonCode == pb.ReasonCode_NO_HINT && r.Detail == api.DetailTimeout
	if reachable && !rec.OverBudget && wrongAnswer(r, seedIndex) {
		rec.Wrong = true
		rec.Msg = fmt.Sprintf("%s %q served by %s at applied index %d, replicas %v", r.ReasonCode, r.Detail, r.ServedBy, r.AppliedIndex, r.Replicas)
	}
	return rec, true
}

// wrongAnswer reports whether r, from a reachable node, hides the seeded
// chain: fresh (not stale), from a state that includes the seed (applied
// index at or past seedIndex), yet not a PREFIX_MATCH naming seedReplica.
func wrongAnswer(r *pb.LookupRouteResponse, seedIndex uint64) bool {
	return !r.Stale && r.AppliedIndex >= seedIndex && !holdsSeed(r)
}

// holdsSeed reports whether r is a PREFIX_MATCH naming seedReplica.
func holdsSeed(r *pb.LookupRouteResponse) bool {
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
		return false
	}
	for _, h := range r.Replicas {
		if h.ReplicaId == seedReplica {
			return true
		}
	}
	return false
}

// pickUp returns a random Up node, or nil.
func (w *Workload) pickUp() *Node {
	var up []*Node
	for _, n := range w.c.Nodes {
		if s, _ := n.State(); s == Up {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rand.IntN(len(up))]
}
