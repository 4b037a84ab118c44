package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/observe"
)

// Partition keys of the simulated fleet's blocks. The replica ids are
// ReplicaPrefix + "e<i>".
const (
	BenchModel  = "bench"
	BenchTenant = "bench"
	BenchScheme = "vllm"
)

// Observation timing.
const (
	// DefaultScrapeInterval is how often the subscriber scrapes each
	// engine's /metrics for replica stats (pressure, hit rate).
	DefaultScrapeInterval = 50 * time.Millisecond
	// barrierTimeout bounds one visibility wait; past it the request is
	// routed anyway and the miss counted (Result.BarrierTimeouts).
	barrierTimeout = 10 * time.Second
)

// ackSink is the Sink the subscriber writes to: it passes every call to
// the cluster and counts, per replica, the block hashes of acknowledged
// STORED and REMOVED events and the highest applied index acknowledged, so
// the gateway can wait for the events of earlier requests.
type ackSink struct {
	inner   observe.Sink
	replica map[string]int

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every acknowledgement
	acked   []int64
	applied uint64
	// statsApplied is the highest applied index of an acknowledged
	// ReportReplicaStats.
	statsApplied uint64
}

func newAckSink(inner observe.Sink, replicas []string) *ackSink {
	s := &ackSink{inner: inner, replica: map[string]int{}, changed: make(chan struct{}), acked: make([]int64, len(replicas))}
	for i, r := range replicas {
		s.replica[r] = i
	}
	return s
}

func (s *ackSink) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	resp, err := s.inner.Ingest(ctx, req)
	if err != nil {
		return resp, err
	}
	s.mu.Lock()
	for _, ev := range req.GetEvents() {
		if ev.GetKind() == pb.BlockEvent_STORED || ev.GetKind() == pb.BlockEvent_REMOVED {
			if i, ok := s.replica[ev.GetReplicaId()]; ok {
				s.acked[i] += int64(len(ev.GetBlockHashes()))
			}
		}
	}
	s.applied = max(s.applied, resp.GetAppliedIndex())
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return resp, nil
}

func (s *ackSink) ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	resp, err := s.inner.ReportStats(ctx, req)
	if err == nil {
		s.mu.Lock()
		s.statsApplied = max(s.statsApplied, resp.GetAppliedIndex())
		s.mu.Unlock()
	}
	return resp, err
}

// waitAcked waits until every replica's acknowledged count reaches want
// and returns the applied index acknowledged by then.
func (s *ackSink) waitAcked(ctx context.Context, want []int64) (uint64, error) {
	for {
		s.mu.Lock()
		done := true
		for i, w := range want {
			if s.acked[i] < w {
				done = false
				break
			}
		}
		applied, ch := s.applied, s.changed
		s.mu.Unlock()
		if done {
			return applied, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// observation is the observation path of one strategy's fleet: a
// publisher and a /metrics server per engine, the observe Subscriber
// reading them and writing to the cluster through ackSink.
type observation struct {
	pubs      []*enginePublisher
	http      []*http.Server
	sink      *ackSink
	published []int64
	status    []pb.ClusterClient
	conns     []*grpc.ClientConn
	verified  uint64
	cancel    context.CancelFunc
	done      chan struct{}
	grpcSink  *observe.GRPCSink
	metrics   *observe.Metrics
	log       *slog.Logger
	sub       *observe.Subscriber

	// seq numbers the published events; touched[h] is the seq of the
	// last event that stored or evicted block h, confirmed the last seq
	// known applied on every node.
	seq, confirmed uint64
	touched        map[uint64]uint64
	firstEvent     bool // an engine published its first event since the last barrier
	everPublished  []bool
}

// publish sends one KV event of engine over its ZMQ publisher at once.
func (o *observation) publish(engine int, ev *KVEvent) {
	n, err := o.pubs[engine].publishAdmission(ev.Blocks, &ev.Adm, time.Now())
	if err != nil {
		o.log.Warn("publish failed", "engine", engine, "err", err)
		return
	}
	o.published[engine] += int64(n)
	o.seq++
	ev.Touches(func(h uint64) { o.touched[h] = o.seq })
	if !o.everPublished[engine] {
		o.everPublished[engine], o.firstEvent = true, true
	}
}

// needsBarrier reports whether a lookup of a prompt with these block ids
// could see a different answer before the published events are applied
// everywhere: some event not yet confirmed stored or evicted one of its
// blocks, or a replica joined the serving set. The index's answer for a
// chain depends only on the entries of its blocks and on the serving set
// (contract §5.4), so skipping the wait otherwise changes no response.
func (o *observation) needsBarrier(hashIDs []uint64) bool {
	if o.firstEvent {
		return true
	}
	if o.seq == o.confirmed {
		return false
	}
	for _, h := range hashIDs {
		if o.touched[h] > o.confirmed {
			return true
		}
	}
	return false
}

// startObservation starts publishers for the fleet's engines, their
// /metrics (each engine's last Scrape), and a Subscriber feeding addrs
// that scrapes every scrape interval of wall time. The caller publishes
// the engines' KV events (publish) when they become visible.
func startObservation(ctx context.Context, f *Fleet, addrs []string, sec client.Config, enc Encoding, scrape time.Duration, seed uint64, log *slog.Logger) (o *observation, err error) {
	o = &observation{published: make([]int64, len(f.Engines)), done: make(chan struct{}), log: log,
		touched: map[uint64]uint64{}, everPublished: make([]bool, len(f.Engines))}
	defer func() {
		if err != nil {
			o.stop()
		}
	}()
	cfg := &observe.Config{ScrapeInterval: observe.Duration(time.Second), ReplayTimeout: observe.Duration(5 * time.Second)}
	replicas := make([]string, len(f.Engines))
	for i, e := range f.Engines {
		p, err := newEnginePublisher(enc, mix64(seed^uint64(i+1)*0x9e3779b97f4a7c15))
		if err != nil {
			return o, err
		}
		o.pubs = append(o.pubs, p)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return o, fmt.Errorf("bench: engine metrics: %w", err)
		}
		eng := e
		hs := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_ = eng.WriteMetrics(w, f.Model)
		})}
		go func() { _ = hs.Serve(ln) }()
		o.http = append(o.http, hs)
		replicas[i] = f.ReplicaID(i)
		cfg.Engines = append(cfg.Engines, observe.EngineConfig{
			Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint(), ReplicaID: replicas[i],
			ModelID: f.Model, TenantID: BenchTenant, HashScheme: BenchScheme, BlockSize: TraceBlockTokens,
			MetricsURL: "http://" + ln.Addr().String() + "/metrics",
		})
	}
	if err := cfg.Validate(); err != nil {
		return o, err
	}
	// Below the configuration's 100 ms floor, which guards real engines:
	// the bench compresses virtual time many times over, and its engines
	// answer from memory.
	cfg.ScrapeInterval = observe.Duration(scrape)
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if sec.TLS != nil {
		dial[0] = grpc.WithTransportCredentials(credentials.NewTLS(sec.TLS))
	}
	if sec.Credentials != nil {
		dial = append(dial, grpc.WithPerRPCCredentials(sec.Credentials))
	}
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, dial...)
		if err != nil {
			return o, fmt.Errorf("bench: cluster address %q: %w", a, err)
		}
		o.conns = append(o.conns, cc)
		o.status = append(o.status, pb.NewClusterClient(cc))
	}
	gs, err := observe.NewGRPCSinkConfig(client.Config{Addrs: leaderFirst(ctx, addrs, o.status), TLS: sec.TLS, Credentials: sec.Credentials})
	if err != nil {
		return o, err
	}
	o.grpcSink = gs
	if err := o.clearReplicas(ctx, gs, f.Model, replicas); err != nil {
		return o, err
	}
	o.sink = newAckSink(gs, replicas)
	o.metrics = observe.NewMetrics(nil)
	sub := observe.New(cfg, o.sink, observe.Options{Logger: log, Metrics: o.metrics})
	o.sub = sub
	sctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go func() { defer close(o.done); _ = sub.Run(sctx) }()
	for _, p := range o.pubs {
		if err := p.WaitSubscribed(ctx, 15*time.Second); err != nil {
			return o, err
		}
	}
	return o, nil
}

// clearReplicas clears the fleet's replicas in the cluster and waits until
// every node applied it. A fresh fleet is its engines restarted: what the
// cluster holds for these replica ids (an earlier run's blocks) is gone.
// The subscriber would clear each replica only at its engine's first
// batch, so lookups before that would see the earlier run's blocks, as
// many as the wall clock lets through.
func (o *observation) clearReplicas(ctx context.Context, sink observe.Sink, model string, replicas []string) error {
	req := &pb.IngestRequest{RequestId: fmt.Sprintf("bench-clear-%d", time.Now().UnixNano())}
	now := time.Now().UnixMilli()
	for _, r := range replicas {
		req.Events = append(req.Events, &pb.BlockEvent{Kind: pb.BlockEvent_CLEARED, ReplicaId: r,
			HashScheme: BenchScheme, ModelId: model, TenantId: BenchTenant, ObservedAtMs: now})
	}
	ctx, cancel := context.WithTimeout(ctx, barrierTimeout)
	defer cancel()
	resp, err := sink.Ingest(ctx, req)
	if err != nil {
		return fmt.Errorf("bench: clearing the fleet's replicas: %w", err)
	}
	return o.waitApplied(ctx, resp.GetAppliedIndex())
}

// leaderFirst returns addrs with the current leader's address first when
// a node names it and it is one of addrs: the subscriber writes there
// first, saving the follower's forwarding hop (any node accepts writes, so
// this is only an optimisation).
func leaderFirst(ctx context.Context, addrs []string, status []pb.ClusterClient) []string {
	out := append([]string(nil), addrs...)
	for _, st := range status {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := st.Status(sctx, &pb.StatusRequest{})
		cancel()
		if err != nil || r.GetLeaderAddress() == "" {
			continue
		}
		for i, a := range out {
			if a == r.GetLeaderAddress() {
				out[0], out[i] = out[i], out[0]
				return out
			}
		}
		return out
	}
	return out
}

// barrier waits until the cluster acknowledged every event published so
// far and every node applied them: they are then visible to a lookup on
// any node.
func (o *observation) barrier(ctx context.Context) error {
	seq := o.seq
	o.firstEvent = false
	ctx, cancel := context.WithTimeout(ctx, barrierTimeout)
	defer cancel()
	applied, err := o.sink.waitAcked(ctx, o.published)
	if err != nil {
		return fmt.Errorf("bench: waiting for the subscriber: %w", err)
	}
	if applied <= o.verified {
		o.confirmed = seq
		return nil
	}
	if err := o.waitApplied(ctx, applied); err != nil {
		return err
	}
	o.verified, o.confirmed = applied, seq
	return nil
}

// syncStats has the subscriber scrape these replicas' engines now and
// waits until every node applied the reports: their last Scrape is then
// what lookups carry.
func (o *observation) syncStats(ctx context.Context, replicas []string) error {
	ctx, cancel := context.WithTimeout(ctx, barrierTimeout)
	defer cancel()
	if err := o.sub.ScrapeNow(ctx, replicas...); err != nil {
		return fmt.Errorf("bench: scraping the engines: %w", err)
	}
	o.sink.mu.Lock()
	applied := o.sink.statsApplied
	o.sink.mu.Unlock()
	return o.waitApplied(ctx, applied)
}

// waitApplied waits until every node's applied index reaches applied.
func (o *observation) waitApplied(ctx context.Context, applied uint64) error {
	for _, st := range o.status {
		for {
			r, err := st.Status(ctx, &pb.StatusRequest{})
			if err == nil && r.GetAppliedIndex() >= applied {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("bench: waiting for every node to apply %d: %w", applied, ctx.Err())
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	return nil
}

// stop ends the subscriber and closes the sockets and servers.
func (o *observation) stop() {
	if o.cancel != nil {
		o.cancel()
		<-o.done
	}
	for _, p := range o.pubs {
		p.Close()
	}
	for _, h := range o.http {
		_ = h.Close()
	}
	for _, c := range o.conns {
		c.Close()
	}
	if o.grpcSink != nil {
		o.grpcSink.Close()
	}
}
