package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// contentPrompts gives a chat request the token ids its first message's
// content names ("p<from>": toks(from, 128)): the gateway's prompt step
// without a tokenizer.
type contentPrompts struct{}

func (contentPrompts) Tokens(_ context.Context, req *openai.Request) (prompt.Prompt, error) {
	var from int
	text, _ := openai.MessageText(req.Messages[0])
	if _, err := fmt.Sscanf(text, "p%d", &from); err != nil {
		return prompt.Prompt{}, err
	}
	return prompt.Prompt{Model: req.Model, TokenIDs: toks(from, 128)}, nil
}

func chatFor(t *testing.T, from int) *openai.Request {
	t.Helper()
	r, err := openai.DecodeChat(fmt.Appendf(nil, `{"model": %q, "messages": [{"role": "user", "content": "p%d"}]}`, model, from))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newGateway is a picker gateway whose hint service is the nodes at addrs,
// sending its full state every 100 ms.
func newGateway(t *testing.T, addrs ...string) *gateway.Gateway {
	t.Helper()
	return newGatewayFull(t, 100*time.Millisecond, addrs...)
}

// newGatewayFull is newGateway sending its full state every full.
func newGatewayFull(t *testing.T, full time.Duration, addrs ...string) *gateway.Gateway {
	t.Helper()
	return newGatewayBudget(t, full, 0, addrs...)
}

// newGatewayBudget is newGatewayFull whose lookups may take budget (0: the
// SDK's and the gateway's defaults, 50 ms): a test that asserts what a
// decision saw gives it seconds, since on a loaded machine a lookup can
// outlast 50 ms and fail open.
func newGatewayBudget(t *testing.T, full, budget time.Duration, addrs ...string) *gateway.Gateway {
	t.Helper()
	cl, err := client.New(client.Config{Addrs: addrs, LookupTimeout: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	g, err := gateway.New(gateway.Config{Prompts: contentPrompts{}, Lookup: cl, LookupBudget: budget,
		// A minute's max age: a loaded machine may take longer than the
		// default 10 s between a pick and the test's last look at it.
		Provisional: gateway.ProvisionalConfig{MaxAge: time.Minute, Push: client.PickShareConfig{FullStateInterval: full}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// newPatientGateway is newGatewayFull whose calls never time out on a
// loaded machine: lookups and pushes wait up to 10 s, and it shares no
// load (a report that outlasts its 50 ms interval fails). A call that
// fails marks its node down, and the pushes that follow then go to the
// other nodes alone, saying so, for them to pass on; a test of what is
// not passed on needs every push to reach every node.
func newPatientGateway(t *testing.T, full time.Duration, addrs ...string) *gateway.Gateway {
	t.Helper()
	cl, err := client.New(client.Config{Addrs: addrs, LookupTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	g, err := gateway.New(gateway.Config{Prompts: contentPrompts{}, Lookup: cl, NoShareLoad: true, LookupBudget: 10 * time.Second,
		Provisional: gateway.ProvisionalConfig{MaxAge: time.Minute,
			Push: client.PickShareConfig{FullStateInterval: full, PushTimeout: 10 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

var replicas = []string{"r1", "r2", "r3"}

// keyOf is the lookup of toks(from, 128) by block hashes, as a gateway
// keys it.
func keyOf(t *testing.T, from int) *pb.LookupRouteRequest {
	t.Helper()
	lr := &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model}
	if err := client.Fingerprint(lr, toks(from, 128), 16); err != nil {
		t.Fatal(err)
	}
	return lr
}

// hintOn is the hint for replica in p's answer to lr, and the answer.
func hintOn(p *proc, lr *pb.LookupRouteRequest, replica string) (*pb.ReplicaHint, *pb.LookupRouteResponse, error) {
	ctx, cancel := ctxT(2 * time.Second)
	defer cancel()
	r, err := p.ic.LookupRoute(ctx, lr)
	if err != nil {
		return nil, nil, err
	}
	for _, h := range r.Replicas {
		if h.ReplicaId == replica {
			return h, r, nil
		}
	}
	return nil, r, nil
}

// waitHint waits until every listed node answers lr with a hint for
// replica whose provisional flag is want (PREFIX_MATCH, 128 tokens).
func waitHint(t *testing.T, limit time.Duration, lr *pb.LookupRouteRequest, replica string, want bool, ps ...*proc) {
	t.Helper()
	poll.Eventually(t, limit, 5*time.Millisecond, func() (bool, string) {
		for _, p := range ps {
			h, r, err := hintOn(p, lr, replica)
			switch {
			case err != nil:
				return false, fmt.Sprintf("%s: lookup error (must fail open): %v", p.id, err)
			case h == nil || r.ReasonCode != pb.ReasonCode_PREFIX_MATCH:
				return false, fmt.Sprintf("%s: no PREFIX_MATCH hint for %s: %v", p.id, replica, r)
			case h.Provisional != want || h.MatchedTokens != 128:
				return false, fmt.Sprintf("%s: hint %v, want provisional %t, 128 tokens", p.id, h, want)
			}
		}
		return true, ""
	})
}

// startPick has g decide the chat of toks(from, 128) among replicas and
// start its request on the replica picked, then waits until every node
// of ps answers the prompt with that replica's provisional hint; the
// flight is the request's.
func startPick(t *testing.T, g *gateway.Gateway, from int, ps ...*proc) *gateway.Flight {
	t.Helper()
	d, err := g.Decide(context.Background(), gateway.Request{OpenAI: chatFor(t, from), Candidates: replicas})
	if err != nil {
		t.Fatal(err)
	}
	f := d.Start(d.Replica)
	waitHint(t, 10*time.Second, keyOf(t, from), d.Replica, true, ps...)
	return f
}

// nodeMetric is the sum of p's metric inferencecache_<name> over the
// series with labels.
func nodeMetric(t *testing.T, p *proc, name string, labels ...string) float64 {
	return metricSum(t, "http://"+p.http+"/metrics", "inferencecache_"+name, labels...)
}

// Provisional residencies through a real 3-node cluster (contract §5.12):
// a pick a gateway makes through one node is seen by lookups on every
// node and by another gateway's decision on another node; the engine's
// events confirming the blocks replace it; a failed request's pick goes;
// while a node is down every pick reaches the live nodes (a push to the
// dead one is repaired by the next full state) and they answer every
// lookup; the node restarted gets the picks made from then on.
func TestProvisional_PickSeenOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	c := startCluster(t, 3)
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]
	// Fresh stats for the three replicas: a confirmed match on one of
	// three distinguishes it (contract §5.4), so the index answers
	// PREFIX_MATCH once the events arrive.
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	var st []*pb.ReplicaStats
	for _, r := range replicas {
		st = append(st, &pb.ReplicaStats{ReplicaId: r, ModelId: model, HashSchemes: []string{scheme}, ObservedAtMs: time.Now().UnixMilli()})
	}
	if _, err := n1.ic.ReportReplicaStats(ctx, &pb.ReportReplicaStatsRequest{Stats: st}); err != nil {
		t.Fatal(err)
	}
	// The nodes' lookup budget is not what this test is about: on a
	// loaded machine a lookup can outlast the default 10 ms and fail open.
	pol, err := n1.ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pol.LookupTimeoutMs = 10000
	if _, err := n1.ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: pol}); err != nil {
		t.Fatal(err)
	}
	ga := newGateway(t, n1.grpc)
	gb := newGatewayBudget(t, 100*time.Millisecond, 10*time.Second, n3.grpc) // its decision's lookup is asserted

	t.Run("PickThroughOneNodeSeenOnEvery", func(t *testing.T) {
		f := startPick(t, ga, 0, n1, n2, n3)
		defer f.Done()
		// n1 got the push from the gateway and passed it to both peers;
		// they got it from n1, and n2 (no gateway's node) passed none on.
		// Polled: n1 counts a push as passed on once the peer has
		// answered, which is after the peer's lookups see it.
		poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
			if got, fwd := nodeMetric(t, n1, "provisional_pushes_received_total", `source="picker"`), nodeMetric(t, n1, "provisional_pushes_forwarded_total"); got < 1 || fwd < 2 {
				return false, fmt.Sprintf("n1: %v pushes from pickers, %v passed on; want ≥ 1 and ≥ 2", got, fwd)
			}
			for _, p := range []*proc{n2, n3} {
				if got, held := nodeMetric(t, p, "provisional_pushes_received_total", `source="node"`), nodeMetric(t, p, "provisional_picks"); got < 1 || held != 1 {
					return false, fmt.Sprintf("%s: %v pushes from nodes, %v picks held; want ≥ 1, 1", p.id, got, held)
				}
			}
			return true, ""
		})
		if fwd := nodeMetric(t, n2, "provisional_pushes_forwarded_total"); fwd != 0 {
			t.Errorf("n2: %v pushes passed on, want none (a copy is not passed on again)", fwd)
		}
		// Another gateway, through another node, sends the same prompt
		// where the first went, before any engine event.
		d2, err := gb.Decide(context.Background(), gateway.Request{OpenAI: chatFor(t, 0), Candidates: replicas})
		if err != nil {
			t.Fatal(err)
		}
		if d2.Replica != f.Replica() || !d2.Provisional || d2.MatchedTokens != 128 {
			t.Fatalf("the other gateway picked %s (provisional %t, %d tokens), want %s from the provisional residency", d2.Replica, d2.Provisional, d2.MatchedTokens, f.Replica())
		}

		// The engine's events arrive: the hint is the confirmed index's.
		ctx, cancel := ctxT(10 * time.Second)
		defer cancel()
		if _, err := n2.ic.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored(f.Replica(), "", toks(0, 128))}}); err != nil {
			t.Fatal(err)
		}
		waitHint(t, 10*time.Second, keyOf(t, 0), f.Replica(), false, n1, n2, n3)
	})

	t.Run("FailedRequestPickGone", func(t *testing.T) {
		f := startPick(t, ga, 10000, n1, n2, n3)
		f.Fail()
		poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
			for _, p := range []*proc{n1, n2, n3} {
				h, r, err := hintOn(p, keyOf(t, 10000), f.Replica())
				if err != nil || h != nil && h.Provisional {
					return false, fmt.Sprintf("%s: %v, %v", p.id, r, err)
				}
			}
			return true, ""
		})
	})

	t.Run("GatewayListingEveryNodeNothingPassedOn", func(t *testing.T) {
		// A gateway listing every node sends each push to each node
		// itself: every node has the pick from the picker, and n2 (no
		// other gateway's node) passes nothing on. Its full states, which
		// every node passes on, come once a minute: none in this test.
		g := newPatientGateway(t, time.Minute, n1.grpc, n2.grpc, n3.grpc)
		before := make([]float64, 3)
		for i, p := range []*proc{n1, n2, n3} {
			before[i] = nodeMetric(t, p, "provisional_pushes_received_total", `source="picker"`)
		}
		fwdBefore := nodeMetric(t, n2, "provisional_pushes_forwarded_total")
		defer startPick(t, g, 15000, n1, n2, n3).Done()
		poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
			for i, p := range []*proc{n1, n2, n3} {
				if got := nodeMetric(t, p, "provisional_pushes_received_total", `source="picker"`); got <= before[i] {
					return false, fmt.Sprintf("%s: %v pushes from pickers, want more than %v", p.id, got, before[i])
				}
			}
			return true, ""
		})
		if fwd := nodeMetric(t, n2, "provisional_pushes_forwarded_total") - fwdBefore; fwd != 0 {
			t.Errorf("n2: %v pushes passed on, want none: every node had its own copy", fwd)
		}
	})

	t.Run("NodeKilledNoLookupErrorNoLostPick", func(t *testing.T) {
		// A gateway on every node: its pushes to the dead one fail and
		// its full states repair them through the others.
		g := newGateway(t, n1.grpc, n2.grpc, n3.grpc)
		var lookupErrs atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // lookups on the live nodes all along
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, p := range []*proc{n1, n3} {
					if _, _, err := hintOn(p, keyOf(t, 0), "r1"); err != nil {
						lookupErrs.Add(1)
					}
				}
			}
		}()
		c.kill(n2)
		var flights []*gateway.Flight
		var picks []int
		for i := range 10 {
			from := 20000 + 1000*i
			flights = append(flights, startPick(t, g, from, n1, n3))
			picks = append(picks, from)
		}
		c.start(n2)
		if err := c.waitServing(30*time.Second, n2); err != nil {
			t.Fatal(err)
		}
		// Every pick made while n2 was down is on the live nodes still;
		// n2 restarted empty (the picks older than the SDK's repair
		// window stay lost there until they expire: harmless), and the
		// picks made from now on reach it.
		for i, from := range picks {
			waitHint(t, 5*time.Second, keyOf(t, from), flights[i].Replica(), true, n1, n3)
		}
		d, err := g.Decide(context.Background(), gateway.Request{OpenAI: chatFor(t, 40000), Candidates: replicas})
		if err != nil {
			t.Fatal(err)
		}
		flights = append(flights, d.Start(d.Replica))
		waitHint(t, 15*time.Second, keyOf(t, 40000), d.Replica, true, n1, n2, n3)
		close(stop)
		<-done
		if n := lookupErrs.Load(); n != 0 {
			t.Fatalf("%d lookups on the live nodes returned an error while a node was down (must fail open)", n)
		}
		for _, f := range flights {
			f.Done()
		}
	})
}
