package e2e

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/turns"
)

var provisionalBench = flag.Bool("provisional-bench", false, "run TestProvisionalVisibility: how soon a gateway's pick is seen in lookups on another node, over real processes")

// percentilesText is "min, p10, p25, p50, p75, p90, p99, max of n" of ds
// in ms (nearest rank): the quantiles the bench's measured share delay
// takes (bench.MeasuredShareDelay).
func percentilesText(ds []time.Duration) string {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return fmt.Sprintf("min %.2f ms, p10 %.2f ms, p25 %.2f ms, p50 %.2f ms, p75 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms of %d",
		ms(ds[0]), ms(at(0.1)), ms(at(0.25)), ms(at(0.5)), ms(at(0.75)), ms(at(0.9)), ms(at(0.99)), ms(ds[len(ds)-1]), len(ds))
}

// The delay of provisional residencies (contract §5.12) on a real 3-node
// cluster: a gateway (the real gateway core and SDK) picks a replica for
// a prompt no one holds; the time from the pick (Decision.Start) until a
// lookup on node 2 (another gateway's view, polled back to back) answers
// the prompt with the provisional hint, plus at most one lookup round
// trip of polling. First with the gateway's SDK listing every node, as
// the proxy and the endpoint picker are run (one --addr per node): the
// push goes to each node at once. Then with node 1 alone as its hint
// service: the push to node 1 plus node 1's fan-out hop to node 2. Last,
// one SharePicks sent to node 1 by hand, timed from before the call
// until node 2 has it (the fan-out hop alone).
func TestProvisionalVisibility(t *testing.T) {
	if !*provisionalBench {
		t.Skip("a benchmark: run with -provisional-bench")
	}
	c := startCluster(t, 3)
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]
	// seen waits for n2 to answer lr with a provisional hint on replica
	// and returns the time since start.
	seen := func(start time.Time, lr *pb.LookupRouteRequest, replica string) time.Duration {
		for time.Since(start) < 5*time.Second {
			if h, _, _ := hintOn(n2, lr, replica); h != nil && h.Provisional {
				return time.Since(start)
			}
		}
		t.Fatalf("pick on %s not seen on n2 within 5 s", replica)
		return 0
	}
	const picks = 300
	// Interleaved, one pick of each gateway in turn, so that both see the
	// same machine.
	gs := []*gateway.Gateway{newGateway(t, n1.grpc, n2.grpc, n3.grpc), newGateway(t, n1.grpc)}
	ds := make([][]time.Duration, len(gs))
	for i := range picks {
		for k, g := range gs {
			from := (1+2*k)*1_000_000 + 1000*i
			lr := keyOf(t, from)
			d, err := g.Decide(context.Background(), gateway.Request{OpenAI: chatFor(t, from), Candidates: replicas})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			f := d.Start(d.Replica)
			ds[k] = append(ds[k], seen(start, lr, d.Replica))
			f.Done()
		}
	}
	t.Logf("pick (Decision.Start, gateway listing every node) → seen in a lookup on n2: %s", percentilesText(ds[0]))
	t.Logf("pick (Decision.Start, gateway on n1) → seen in a lookup on n2: %s", percentilesText(ds[1]))

	var hop []time.Duration
	for i := range picks {
		from := 5_000_000 + 1000*i
		lr := keyOf(t, from)
		ctx, cancel := ctxT(2 * time.Second)
		start := time.Now()
		if _, err := n1.ic.SharePicks(ctx, &pb.SharePicksRequest{PickerId: "gw-hand", Sequence: uint64(i + 1),
			Picks: []*pb.ProvisionalPick{{PickId: uint64(i + 1), ReplicaId: "r2", HashScheme: scheme, ModelId: model, BlockHashes: lr.BlockHashes}}}); err != nil {
			t.Fatal(err)
		}
		cancel()
		hop = append(hop, seen(start, lr, "r2"))
	}
	t.Logf("one SharePicks sent to n1 → seen on n2: %s", percentilesText(hop))
}

// The cost of a turn (contract §5.13) on a real 3-node cluster: two
// gateways (the real gateway core and SDK, each listing every node)
// decide at once; the first's lookup takes its turn, the second's waits
// at the node until the first's pick's push, which carries its load
// report, settles it. The second's wait, measured by the node
// (turn_wait_us), runs from its lookup's arrival to the settle: the
// handoff between two gateways' decisions, which the bench models as one
// share delay.
func TestTurnHandoff(t *testing.T) {
	if !*provisionalBench {
		t.Skip("a benchmark: run with -provisional-bench")
	}
	c := startCluster(t, 3)
	addrs := []string{c.procs[0].grpc, c.procs[1].grpc, c.procs[2].grpc}
	a, b := newGateway(t, addrs...), newGateway(t, addrs...)
	const rounds = 300
	var waits []time.Duration
	ranOut := 0
	for i := range rounds {
		da, err := a.Decide(context.Background(), gateway.Request{OpenAI: chatFor(t, 7_000_000+1000*i), Candidates: replicas})
		if err != nil {
			t.Fatal(err)
		}
		if !da.Turn {
			continue // a's own wait ran out (b's last turn unsettled)
		}
		got := make(chan *gateway.Decision, 1)
		go func() {
			db, err := b.Decide(context.Background(), gateway.Request{OpenAI: chatFor(t, 8_000_000+1000*i), Candidates: replicas})
			if err != nil {
				t.Error(err)
			}
			got <- db
		}()
		fa := da.Start(da.Replica)
		db := <-got
		if db.Turn {
			waits = append(waits, db.TurnWait)
		} else {
			ranOut++
		}
		db.Start(db.Replica).Done()
		fa.Done()
	}
	if len(waits) == 0 {
		t.Fatalf("no turn handed over in %d rounds (%d waits ran out)", rounds, ranOut)
	}
	t.Logf("turn handoff (gateway b's wait for gateway a's turn, at the node): %s; %d of %d waits ran out (%v)", percentilesText(waits), ranOut, rounds, turns.DefaultWait)
}
