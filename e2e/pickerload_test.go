package e2e

import (
	"fmt"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// others is one node's others_* for replica r1 as picker asker sees them
// (a lookup with include_load), or why it could not tell.
func othersOn(p *proc, asker string) (*pb.ReplicaLoad, string) {
	ctx, cancel := ctxT(2 * time.Second)
	defer cancel()
	r, err := p.ic.LookupRoute(ctx, &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TokenIds: toks(0, 32), IncludeLoad: true, PickerId: asker})
	if err != nil {
		return nil, fmt.Sprintf("%s: lookup: %v", p.id, err)
	}
	for _, l := range r.Loads {
		if l.ReplicaId == "r1" {
			return l, ""
		}
	}
	return nil, fmt.Sprintf("%s: no load entry for r1 in %v", p.id, r.Loads)
}

// waitOthers waits until every listed node reports, for asker, others'
// load on r1 equal to want (prefilling, tokens, running, pickers).
func waitOthers(t *testing.T, limit time.Duration, asker string, want [4]uint64, ps ...*proc) {
	t.Helper()
	poll.Eventually(t, limit, 10*time.Millisecond, func() (bool, string) {
		for _, p := range ps {
			l, why := othersOn(p, asker)
			if l == nil {
				return false, why
			}
			got := [4]uint64{uint64(l.OthersPrefillingRequests), l.OthersPrefillTokens, uint64(l.OthersRunningRequests), uint64(l.OthersPickers)}
			if got != want {
				return false, fmt.Sprintf("%s: r1 others for %q = %v, want %v", p.id, asker, got, want)
			}
		}
		return true, ""
	})
}

func reportStats(t *testing.T, p *proc) {
	t.Helper()
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	now := time.Now().UnixMilli()
	var st []*pb.ReplicaStats
	for _, r := range []string{"r1", "r2"} {
		st = append(st, &pb.ReplicaStats{ReplicaId: r, ModelId: model, HashSchemes: []string{scheme}, ObservedAtMs: now, WaitingRequests: 1, RunningRequests: 3})
	}
	if _, err := p.ic.ReportReplicaStats(ctx, &pb.ReportReplicaStatsRequest{Stats: st}); err != nil {
		t.Fatalf("stats: %v", err)
	}
}

// Pickers' in-flight load, shared through a real 3-node cluster (contract
// §5.11): a report to one node is seen in lookups on every node, the
// asker's own left out; a picker that stops reporting is forgotten within
// 2 of its intervals; a node restarted (SIGKILL) gets the load again from
// the next reports.
func TestPickerLoad_SharedThroughTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	c := startCluster(t, 3)
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]
	reportStats(t, n1)

	// gw-a reports to n1 only, through the SDK: on r1 one request before
	// its first token (500 uncached tokens) and one decoding.
	cla, err := client.New(client.Config{Addrs: []string{n1.grpc}})
	if err != nil {
		t.Fatal(err)
	}
	defer cla.Close()
	pa := client.NewPicker(client.DefaultPickerConfig())
	pa.StartOn("r1", 500)
	pa.StartOn("r1", 200).FirstToken()
	sa, err := client.StartLoadShare(pa, cla, client.LoadShareConfig{PickerID: "gw-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Stop()

	t.Run("ReportToOneNodeSeenOnEveryNode", func(t *testing.T) {
		waitOthers(t, 10*time.Second, "gw-b", [4]uint64{1, 500, 2, 1}, n1, n2, n3)
		// Its own load is left out of gw-a's lookups, on every node.
		waitOthers(t, 5*time.Second, "gw-a", [4]uint64{0, 0, 0, 0}, n1, n2, n3)
		// n1 got the reports from the picker and passed each to both
		// peers; n2 and n3 got them from n1 and passed none on.
		m := func(p *proc, name string, labels ...string) float64 {
			return metricSum(t, "http://"+p.http+"/metrics", "inferencecache_"+name, labels...)
		}
		if got, fwd := m(n1, "picker_load_reports_received_total", `source="picker"`), m(n1, "picker_load_reports_forwarded_total"); got < 1 || fwd < 2 {
			t.Errorf("n1: %v reports from pickers, %v passed on; want ≥ 1 and ≥ 2", got, fwd)
		}
		for _, p := range []*proc{n2, n3} {
			if fromNode, fwd := m(p, "picker_load_reports_received_total", `source="node"`), m(p, "picker_load_reports_forwarded_total"); fromNode < 1 || fwd != 0 {
				t.Errorf("%s: %v reports from nodes, %v passed on; want ≥ 1 and none (a copy is not passed on again)", p.id, fromNode, fwd)
			}
			if e := m(p, "picker_load_entries"); e != 1 {
				t.Errorf("%s: %v picker load entries, want 1 (gw-a on r1)", p.id, e)
			}
		}
	})

	t.Run("SumOverOtherPickersOnly", func(t *testing.T) {
		// gw-b reports to n3 by hand: r1 (2 prefilling, 300 tokens, 4
		// running), interval 200 ms, then stops.
		ctx, cancel := ctxT(5 * time.Second)
		defer cancel()
		var sent time.Time
		for seq := uint64(1); seq <= 3; seq++ {
			sent = time.Now()
			if _, err := n3.ic.ReportPickerLoad(ctx, &pb.ReportPickerLoadRequest{PickerId: "gw-b", Sequence: seq, IntervalMs: 200,
				Loads: []*pb.PickerReplicaLoad{{ReplicaId: "r1", PrefillingRequests: 2, PrefillTokens: 300, RunningRequests: 4}}}); err != nil {
				t.Fatal(err)
			}
		}
		// By hand: gw-a sees gw-b's; gw-b sees gw-a's; a third sees both.
		waitOthers(t, 5*time.Second, "gw-a", [4]uint64{2, 300, 4, 1}, n1, n2, n3)
		waitOthers(t, time.Second, "gw-b", [4]uint64{1, 500, 2, 1}, n1, n2, n3)
		waitOthers(t, time.Second, "gw-c", [4]uint64{3, 800, 6, 2}, n1, n2, n3)
		// gw-b stopped: gone from every node 2 intervals (400 ms) after its
		// last report arrived; the poll and loopback add well under 300 ms.
		waitOthers(t, 5*time.Second, "gw-a", [4]uint64{0, 0, 0, 0}, n1, n2, n3)
		if took := time.Since(sent); took > 700*time.Millisecond {
			t.Errorf("gw-b's load gone from every node %v after its last report, want within 2 × 200 ms (+300 ms slack)", took)
		}
	})

	t.Run("NodeRestartedGetsTheLoadAgain", func(t *testing.T) {
		reportStats(t, n1) // keep r1's stats fresh across the restart
		c.kill(n2)
		// n2 down: n1 goes on passing gw-a's reports to n3.
		waitOthers(t, 5*time.Second, "gw-b", [4]uint64{1, 500, 2, 1}, n1, n3)
		c.start(n2)
		if err := c.waitServing(30*time.Second, n2); err != nil {
			t.Fatal(err)
		}
		// n2 restarted empty; once gossip shows it alive to n1, n1's fan-out
		// brings gw-a's load back.
		waitOthers(t, 15*time.Second, "gw-b", [4]uint64{1, 500, 2, 1}, n2)
	})

	t.Run("StoppedPickerGoneEverywhere", func(t *testing.T) {
		sa.Stop()
		waitOthers(t, 5*time.Second, "gw-b", [4]uint64{0, 0, 0, 0}, n1, n2, n3)
		ctx, cancel := ctxT(5 * time.Second)
		defer cancel()
		poll.Eventually(t, 5*time.Second, 20*time.Millisecond, func() (bool, string) {
			st, err := n2.cl.Status(ctx, &pb.StatusRequest{})
			if err != nil {
				return false, err.Error()
			}
			return len(st.Pickers) == 0, fmt.Sprintf("n2 still lists pickers %v", st.Pickers)
		})
	})
}
