package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// WANConfig is one delayed-network run: a 3-node cluster on loopback
// whose Raft traffic passes DelayProxies, one sequential SDK writer, a
// status poller counting elections, then a leader kill under the same
// impairment.
type WANConfig struct {
	Binary, Dir string
	// Profile is the servers' --raft-timing (fast, lan, wan).
	Profile string
	// Delay is the one-way delay on every Raft connection, Loss the
	// per-segment loss probability.
	Delay time.Duration
	Loss  float64
	// Hold is how long the writer runs before the leader is killed.
	Hold   time.Duration
	Logger *slog.Logger
}

// WANResult is what a WANConfig run measured.
type WANResult struct {
	Cfg WANConfig
	// Elections: leader changes seen during Hold after the first leader
	// (a new term with a leader, or a node reporting Leader in a new term).
	Elections int
	// Terms seen during Hold, in order.
	Terms []uint64
	// Acked and Failed writes during Hold; write latency percentiles of
	// the acknowledged ones.
	Acked, Failed          int
	WriteP50Ms, WriteP99Ms float64
	// FailoverMs: leader SIGKILL → a survivor reports Leader in a newer
	// term (-1: none within 60 s).
	FailoverMs float64
}

// RunWAN runs cfg and returns its measurements; an error means the run
// could not be set up.
func RunWAN(ctx context.Context, cfg WANConfig) (*WANResult, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c, err := NewCluster(ctx, Options{Nodes: 3, Binary: cfg.Binary, Dir: cfg.Dir, DelayRaft: true,
		Flags: []string{"--raft-timing", cfg.Profile}, Logger: log})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, p := range c.Proxies {
		p.SetImpairment(cfg.Delay, cfg.Loss, 0)
	}
	res := &WANResult{Cfg: cfg, FailoverMs: -1}
	if _, err := c.WaitLeader(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.GRPC)
	}
	sdk, err := client.New(client.Config{Addrs: addrs, WriteRetry: 30 * time.Second, WriteAttemptTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer sdk.Close()

	hctx, stop := context.WithTimeout(ctx, cfg.Hold)
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lats []float64
	wg.Add(2)
	go func() {
		defer wg.Done()
		lats = wanWrites(ctx, hctx, sdk, res, &mu)
	}()
	go func() {
		defer wg.Done()
		wanTerms(ctx, hctx, c, res, &mu)
	}()
	wg.Wait()
	res.Elections = max(len(res.Terms)-1, 0)
	sort.Float64s(lats)
	res.WriteP50Ms, res.WriteP99Ms = percentileF(lats, 0.5), percentileF(lats, 0.99)
	if !wanFailover(ctx, c, res) {
		return res, nil
	}
	log.Info("chaos: wan run", "profile", cfg.Profile, "delay", cfg.Delay, "loss", cfg.Loss, "elections", res.Elections,
		"acked", res.Acked, "failed", res.Failed, "write_p50_ms", res.WriteP50Ms, "failover_ms", res.FailoverMs)
	return res, nil
}

// wanWrites ingests one fresh chain after the other through sdk until
// hctx ends (each write may take 30 s past it), counting acknowledged and
// failed writes into res under mu. It returns the acknowledged writes'
// latencies in ms.
func wanWrites(ctx, hctx context.Context, sdk *client.Client, res *WANResult, mu *sync.Mutex) []float64 {
	var lats []float64
	for seq := 0; hctx.Err() == nil; seq++ {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := sdk.Ingest(wctx, &pb.IngestRequest{RequestId: fmt.Sprintf("wan-%d", seq),
			Events: []*pb.BlockEvent{stored("r-wan", chainAt(uint32(seq)*256+1))}})
		cancel()
		mu.Lock()
		if err == nil {
			res.Acked++
			lats = append(lats, ms(time.Since(start)))
		} else {
			res.Failed++
		}
		mu.Unlock()
	}
	return lats
}

// wanTerms polls every node's Status every 50 ms until hctx ends and adds
// each term a node reports Leader in to res.Terms under mu.
func wanTerms(ctx, hctx context.Context, c *Cluster, res *WANResult, mu *sync.Mutex) {
	for hctx.Err() == nil {
		for _, n := range c.Nodes {
			st, err := c.Status(ctx, n)
			if err != nil || st.State != "Leader" {
				continue
			}
			mu.Lock()
			if !slices.Contains(res.Terms, st.Term) {
				res.Terms = append(res.Terms, st.Term)
			}
			mu.Unlock()
		}
		sleepCtx(hctx, 50*time.Millisecond)
	}
}

// wanFailover kills the leader under the same impairment and sets
// res.FailoverMs to how long the others took to elect a new one (left -1
// when none was elected within 60 s). It reports false, killing nothing,
// when it found no leader to kill.
func wanFailover(ctx context.Context, c *Cluster, res *WANResult) bool {
	leader, err := c.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		return false
	}
	st, err := c.Status(ctx, leader)
	if err != nil {
		return false
	}
	start := time.Now()
	c.Kill(leader)
	r := &Runner{c: c}
	if _, d, err := r.waitNewLeader(ctx, start, st.Term, 60*time.Second, leader); err == nil {
		res.FailoverMs = ms(d)
	}
	return true
}

// WANMarkdown renders WAN results as a CHAOS.md section.
func WANMarkdown(rs []*WANResult, command string) string {
	var b []byte
	p := func(format string, a ...any) { b = fmt.Appendf(b, format+"\n", a...) }
	p("")
	p("## Delayed network: Raft timing profiles")
	p("")
	p("Written by `%s` (TestChaosWAN). 3 nodes on loopback; every Raft connection passes a userspace delay proxy (this kernel has no sch_netem) that delays each direction by the one-way delay and stalls a chunk by one retransmission timeout (2 × delay + 200 ms) with the probability that one of its 1448-byte segments was lost. Gossip and gRPC are not delayed. One SDK writer issues sequential ingests for the hold; a status poller (every 50 ms, every node) records each term that had a leader. Then the leader is SIGKILLed with the impairment still on.", command)
	p("")
	p("| --raft-timing | one-way delay | loss | hold | elections during hold | writes acked / failed | write p50 / p99 ms | failover ms |")
	p("|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fo := "none within 60 s"
		if r.FailoverMs >= 0 {
			fo = fmt.Sprintf("%.0f", r.FailoverMs)
		}
		p("| %s | %v | %.0f %% | %v | %d | %d / %d | %.0f / %.0f | %s |", r.Cfg.Profile, r.Cfg.Delay, r.Cfg.Loss*100, r.Cfg.Hold,
			r.Elections, r.Acked, r.Failed, r.WriteP50Ms, r.WriteP99Ms, fo)
	}
	return string(b)
}
