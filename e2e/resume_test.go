package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// resumeRig is a one-node cluster, one engine with vLLM's replay endpoint
// and a standalone subscriber process feeding the cluster from it.
type resumeRig struct {
	t   *testing.T
	c   *cluster
	pub *vllmpub.Publisher
	sub *proccluster.Proc
	cfg string
}

func newResumeRig(t *testing.T) *resumeRig {
	t.Helper()
	r := &resumeRig{t: t, c: startCluster(t, 1)}
	// A second replica of the model: a prefix only one replica of one
	// holds has no distinguishing power (contract §5.4) and ranks as no
	// hint.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.c.procs[0].ic.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("other", tenant, toks(70000, 16))}}); err != nil {
		t.Fatal(err)
	}
	r.startEngine("", "")
	r.cfg = filepath.Join(t.TempDir(), "engines.yaml")
	yaml := fmt.Sprintf("replay_timeout: 5s\nengines:\n  - endpoint: %s\n    replay_endpoint: %s\n    replica_id: eng-a\n    model_id: %s\n    tenant_id: %s\n    hash_scheme: %s\n    block_size: 16\n",
		r.pub.Endpoint(), r.pub.ReplayEndpoint(), model, tenant, scheme)
	if err := os.WriteFile(r.cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	r.sub = r.c.pc.Add(proccluster.Spec{Name: "subscriber", LogPath: filepath.Join(t.TempDir(), "subscriber.log"),
		Args: []string{"subscribe", "--config", r.cfg, "--addr", r.c.procs[0].grpc, "--log-level", "debug"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- subscriber log ---\n%s", r.sub.LogTail(8000))
		}
	})
	r.startSubscriber()
	return r
}

// startEngine starts the engine's publisher, on the given endpoints (""
// = random loopback ports).
func (r *resumeRig) startEngine(bind, replay string) {
	p, err := vllmpub.New(vllmpub.Options{Bind: bind, Replay: true, ReplayBind: replay})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(p.Close)
	r.pub = p
}

func (r *resumeRig) startSubscriber() {
	r.t.Helper()
	if err := r.sub.Start(); err != nil {
		r.t.Fatal(err)
	}
	if err := r.pub.WaitSubscribed(r.t.Context(), 20*time.Second); err != nil {
		r.t.Fatal(err)
	}
}

// store publishes a batch storing chain (8 blocks of 16 tokens, engine
// hashes from base).
func (r *resumeRig) store(chain []uint32, base uint64) {
	r.t.Helper()
	hs := make([]uint64, 8)
	for i := range hs {
		hs[i] = base + uint64(i)
	}
	ts := float64(time.Now().UnixMilli()) / 1000
	if _, err := r.pub.Publish(ot.Batch(ts, -1, ot.Stored(ot.Hashes(hs...), nil, chain, 16, nil, "GPU", nil))); err != nil {
		r.t.Fatal(err)
	}
}

// hint is the lookup of chain: whether eng-a leads a PREFIX_MATCH with
// all 128 tokens, and the answer in words.
func (r *resumeRig) hint(chain []uint32) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := r.c.procs[0].ic.LookupRoute(ctx, lookupReq(tenant, chain))
	ok := err == nil && res.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH && len(res.GetReplicas()) > 0 &&
		res.GetReplicas()[0].GetReplicaId() == "eng-a" && res.GetReplicas()[0].GetMatchedTokens() == 128
	return ok, fmt.Sprintf("lookup: %v %v %q %v (want PREFIX_MATCH by eng-a, 128 tokens)", err, res.GetReasonCode(), res.GetDetail(), res.GetReplicas())
}

// A subscriber killed for 15 s while its engine goes on publishing comes
// back without clearing: every probe prefix, stored before the kill and
// during it, keeps its PREFIX_MATCH, and no CLEARED is ever sent
// (contract §6.11).
func TestSubscriber_RestartKeepsTheHintsTheEnginesHold(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a subscriber process")
	}
	r := newResumeRig(t)
	probes := [][]uint32{chainA, toks(9000, 128), chainB}
	r.store(probes[0], 1000)
	r.store(probes[1], 2000)
	for i, p := range probes[:2] {
		poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
			ok, why := r.hint(p)
			return ok, fmt.Sprintf("probe %d: %s", i, why)
		})
	}
	// The position is recorded at most a second after its events.
	poll.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ps, err := r.c.procs[0].ic.GetStreamPositions(ctx, &pb.GetStreamPositionsRequest{ReplicaIds: []string{"eng-a"}})
		return err == nil && len(ps.GetPositions()) == 1 && ps.GetPositions()[0].GetSeq() == 1, fmt.Sprintf("positions %v, %v; want eng-a at seq 1", ps, err)
	})
	r.sub.Kill()
	r.store(probes[2], 3000) // published while no subscriber listens
	time.Sleep(15 * time.Second)
	for _, p := range probes[:2] {
		if ok, why := r.hint(p); !ok {
			t.Fatalf("with the subscriber down: %s", why)
		}
	}
	r.startSubscriber()
	poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
		return r.sub.LogContains("stream resumed"), "the subscriber never logged \"stream resumed\""
	})
	for i, p := range probes {
		poll.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
			ok, why := r.hint(p)
			return ok, fmt.Sprintf("probe %d: %s", i, why)
		})
	}
	if r.sub.LogContains("clearing") {
		t.Fatalf("the restarted subscriber cleared the replica:\n%s", r.sub.LogTail(4000))
	}
}

// An engine seen to restart (its connection lost, then back) gives no
// hints until its new events arrive: the restarted engine publishes
// nothing, and its old hints go (contract §6.11).
func TestSubscriber_RestartedEngineLosesItsHintsBeforeItsFirstEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a subscriber process")
	}
	r := newResumeRig(t)
	r.store(chainA, 1000)
	poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) { return r.hint(chainA) })
	ep, rep := r.pub.Endpoint(), r.pub.ReplayEndpoint()
	r.pub.Close()
	time.Sleep(500 * time.Millisecond) // the engine is down
	r.startEngine(ep, rep)
	if err := r.pub.WaitSubscribed(t.Context(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
		ok, why := r.hint(chainA)
		return !ok, "the restarted engine still has its old hint: " + why
	})
	// Its new events count again.
	r.store(chainB, 5000)
	poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) { return r.hint(chainB) })
}
