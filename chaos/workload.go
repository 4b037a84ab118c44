package chaos

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	// answered fresh (not stale), yet not with a PREFIX_MATCH naming the
	// seeded chain's replica. The chain is committed before the readers
	// start and never expires during a run, so such an answer hides
	// acknowledged state; it fails the run.
	Wrong bool
}

// RegInput is a register operation: Set(Value) or Get.
type RegInput struct {
	Set   bool
	Value uint32
}

// RegOutput is a Get's answer.
type RegOutput struct {
	Value   uint32
	Version uint64
	// Unknown: a Set whose outcome is unknown (error or timeout).
	Unknown bool
}

// RegOp is one register operation with its node and wall times.
type RegOp struct {
	Client int
	Node   string
	// Leader: a Get answered by a node that reported itself Leader in
	// the same term right before and right after the call (only those
	// enter the linearizability check).
	Leader     bool
	In         RegInput
	Out        RegOutput
	Call, Ret  time.Time
	Failed     bool
	FailReason string
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
	// leaderHint: index of the node the poller last saw as leader.
	leaderHint atomic.Int32

	mon    *Monitor
	stop   context.CancelFunc
	wg     sync.WaitGroup
	t0     time.Time
	seeded []uint32
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
	_, err = sdk.Ingest(ctx, &pb.IngestRequest{RequestId: "seed-" + w.runTag, Events: []*pb.BlockEvent{
		stored(seedReplica, w.seeded), stored("seed-b", chainAt(4_000_100_000)),
	}})
	if err != nil {
		return nil, fmt.Errorf("chaos: seed: %w", err)
	}
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
		rec, ok := readOnce(ctx, n, req)
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
func readOnce(ctx context.Context, n *Node, req *pb.LookupRouteRequest) (rec LookupRec, ok bool) {
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
	if reachable && !r.Stale && !holdsSeed(r) {
		rec.Wrong = true
		rec.Msg = fmt.Sprintf("%s %q served by %s at applied index %d, replicas %v", r.ReasonCode, r.Detail, r.ServedBy, r.AppliedIndex, r.Replicas)
	}
	return rec, true
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

func (w *Workload) regSetter(ctx context.Context, client int) {
	defer w.wg.Done()
	for ctx.Err() == nil {
		n := w.pickUp()
		if n == nil {
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		v := w.regNext.Add(1)
		p := proto.Clone(w.base).(*pb.CachePolicy)
		p.SloTightThresholdMs = v
		op := RegOp{Client: client, Node: n.ID, In: RegInput{Set: true, Value: v}, Call: time.Now()}
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		got, err := n.IC.SetCachePolicy(cctx, &pb.SetCachePolicyRequest{Policy: p})
		cancel()
		op.Ret = time.Now()
		if err != nil {
			op.Failed, op.FailReason = true, err.Error()
			// INVALID_ARGUMENT would mean nothing was committed; every
			// other failure leaves the outcome unknown.
			op.Out.Unknown = status.Code(err) != codes.InvalidArgument
		} else {
			op.Out = RegOutput{Value: got.SloTightThresholdMs, Version: got.Version}
		}
		w.mu.Lock()
		w.regOps = append(w.regOps, op)
		w.mu.Unlock()
		if !sleepCtx(ctx, w.RegPause) {
			return
		}
	}
}

func (w *Workload) regGetter(ctx context.Context, client int) {
	defer w.wg.Done()
	for i := 0; ctx.Err() == nil; i++ {
		// Every other read goes to the believed leader (confirmed ones form the
		// linearizable history); the rest go to any node (local reads:
		// SPEC 8 lets them be stale, checked for no phantom values and
		// per-process monotonic versions).
		var n *Node
		leader := false
		if h := int(w.leaderHint.Load()); i%2 == 0 && h >= 0 {
			if s, _ := w.c.Nodes[h].State(); s == Up {
				n, leader = w.c.Nodes[h], true
			}
		}
		if n == nil {
			n = w.pickUp()
		}
		if n == nil {
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		_, gen := n.State()
		// A leader read counts as one only when the node reports itself
		// Leader in the same term right before and right after the read
		// (the hint alone may be stale: the leader may have been killed,
		// restarted or cut off since the poller saw it).
		var term uint64
		if leader {
			st, err := w.c.Status(ctx, n)
			leader = err == nil && st.State == "Leader"
			if leader {
				term = st.Term
			}
		}
		op := RegOp{Client: client, Node: fmt.Sprintf("%s#%d", n.ID, gen), In: RegInput{}, Call: time.Now()}
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		got, err := n.IC.GetCachePolicy(cctx, &pb.GetCachePolicyRequest{})
		cancel()
		op.Ret = time.Now()
		if leader {
			st, err := w.c.Status(ctx, n)
			op.Leader = err == nil && st.State == "Leader" && st.Term == term
		}
		if err != nil {
			op.Failed, op.FailReason = true, err.Error()
		} else {
			op.Out = RegOutput{Value: got.SloTightThresholdMs, Version: got.Version}
		}
		w.mu.Lock()
		w.regOps = append(w.regOps, op)
		w.mu.Unlock()
		if !sleepCtx(ctx, w.RegPause) {
			return
		}
	}
}

// History returns copies of the recorded writes, lookups and register
// operations.
func (w *Workload) History() ([]*WriteRec, []LookupRec, []RegOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*WriteRec(nil), w.writes...), append([]LookupRec(nil), w.lookups...), append([]RegOp(nil), w.regOps...)
}

// porcupineOps converts the register history for porcupine: every Set
// (unknown outcomes stay open to the end of the history unless no read
// ever saw their value, in which case they are dropped: an unobserved
// write of a unique value can always be linearized last) and the Gets
// answered by a confirmed leader. Failed Gets are dropped (a read with no
// answer constrains nothing).
func porcupineOps(ops []RegOp, t0 time.Time) []porcupine.Operation {
	seen := map[uint32]bool{}
	for _, op := range ops {
		if !op.In.Set && !op.Failed {
			seen[op.Out.Value] = true
		}
	}
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Failed && !op.In.Set {
			continue
		}
		if !op.In.Set && !op.Leader {
			continue
		}
		ret := op.Ret.Sub(t0).Nanoseconds()
		if op.In.Set && op.Out.Unknown {
			if !seen[op.In.Value] {
				continue
			}
			ret = math.MaxInt64
		} else if op.In.Set && op.Failed {
			continue // definitely not applied
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op.In, Call: op.Call.Sub(t0).Nanoseconds(),
			Output: op.Out, Return: ret, Metadata: op.Node})
	}
	return out
}

// RegisterModel is the porcupine model of the policy register: the state
// is the value of sloTightThresholdMs; Set always succeeds, Get must
// return the state.
func RegisterModel(initial uint32) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return initial },
		Step: func(state, input, output any) (bool, any) {
			in := input.(RegInput)
			if in.Set {
				return true, in.Value
			}
			return output.(RegOutput).Value == state.(uint32), state
		},
		Equal: func(a, b any) bool { return a.(uint32) == b.(uint32) },
		DescribeOperation: func(input, output any) string {
			in := input.(RegInput)
			if in.Set {
				if output.(RegOutput).Unknown {
					return fmt.Sprintf("set(%d) → ?", in.Value)
				}
				return fmt.Sprintf("set(%d)", in.Value)
			}
			o := output.(RegOutput)
			return fmt.Sprintf("get() → %d (v%d)", o.Value, o.Version)
		},
		DescribeState:             func(s any) string { return fmt.Sprint(s) },
		DescribeOperationMetadata: func(m any) string { return fmt.Sprint(m) },
	}
}
