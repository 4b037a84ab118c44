package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// engineYAML is a subscriber configuration (contract §12.6) for the publishers.
func engineYAML(pubs map[string]*ot.Publisher) string {
	s := "engines:\n"
	for id, p := range pubs {
		s += fmt.Sprintf("  - endpoint: %s\n    replica_id: %s\n    model_id: %s\n    tenant_id: %s\n    hash_scheme: %s\n    block_size: 16\n",
			p.Endpoint(), id, model, tenant, scheme)
	}
	return s
}

// `server --subscribe-config` runs the KV-event subscriber inside the
// server: engine events published over ZMQ reach the index through the
// node's own write path, and SIGHUP reloads the engine list (a removed
// engine's blocks are cleared).
func TestServer_EmbeddedSubscriberFeedsTheIndexAndReloadsOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	pubs := map[string]*ot.Publisher{}
	for _, id := range []string{"eng-a", "eng-b"} {
		p, err := ot.NewPublisher(false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pubs[id] = p
	}
	cfgPath := filepath.Join(t.TempDir(), "engines.yaml")
	if err := os.WriteFile(cfgPath, []byte(engineYAML(pubs)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 1, "--subscribe-config", cfgPath)
	n := c.procs[0]
	for id, p := range pubs {
		if err := p.WaitSubscribed(t.Context(), 15*time.Second); err != nil {
			t.Fatalf("%s: the server's subscriber never connected: %v", id, err)
		}
	}
	ts := float64(time.Now().UnixMilli()) / 1000
	// eng-a caches chainA (8 blocks), eng-b caches chainB.
	for id, chain := range map[string][]uint32{"eng-a": chainA, "eng-b": chainB} {
		hs := make([]uint64, 8)
		for i := range hs {
			hs[i] = uint64(1000 + i)
		}
		if _, err := pubs[id].Publish(ot.Batch(ts, -1, ot.Stored(ot.Hashes(hs...), nil, chain, 16, nil, "GPU", nil))); err != nil {
			t.Fatal(err)
		}
	}
	want := func(chain []uint32, replica string) {
		t.Helper()
		poll.Eventually(t, 15*time.Second, 100*time.Millisecond, func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r, _ := n.ic.LookupRoute(ctx, lookupReq(tenant, chain))
			cancel()
			why := fmt.Sprintf("lookup: %v %q %v, want PREFIX_MATCH led by %q with 128 tokens (\"\" = no match)", r.GetReasonCode(), r.GetDetail(), r.GetReplicas(), replica)
			if replica == "" {
				return r.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH, why
			}
			return r.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH && len(r.GetReplicas()) > 0 && r.GetReplicas()[0].GetReplicaId() == replica &&
				r.GetReplicas()[0].GetMatchedTokens() == 128, why
		})
	}
	want(chainA, "eng-a")
	want(chainB, "eng-b")

	// Drop eng-a from the file and reload: its replica is cleared.
	delete(pubs, "eng-a")
	if err := os.WriteFile(cfgPath, []byte(engineYAML(pubs)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want(chainA, "")
	if r, _ := n.ic.LookupRoute(context.Background(), lookupReq(tenant, chainB)); r.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH {
		t.Fatalf("eng-b alone in the serving set cannot be a prefix match (distinguishing power 0), got %v", r.GetReplicas())
	}
}

// SIGHUP is the reload signal; a server with nothing to reload must keep
// serving, not die of the signal's default action.
func TestServer_SIGHUPWithoutSubscriberKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	c := startCluster(t, 1)
	n := c.procs[0]
	done := n.Done()
	for i := 1; i <= 3; i++ {
		if err := n.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		// Logged once handled: a signal the server handles does not take
		// its default action (exit). One at a time, since pending
		// signals of one kind merge.
		waitLogCount(t, n, "SIGHUP: nothing to reload without --subscribe-config", i, 10*time.Second)
	}
	select {
	case <-done:
		t.Fatal("the server exited on SIGHUP")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := n.cl.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("status after SIGHUP: %v", err)
	}
}

// A mistyped --models-dir would silently turn every prompt_text lookup
// into NO_HINT: the server refuses to start with it.
func TestServer_RefusesMissingModelsDir(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	out, err := exec.Command(binPath, "server", "--node-id", "x", "--data-dir", t.TempDir(), "--bootstrap-expect", "1",
		"--grpc-addr", "127.0.0.1:0", "--models-dir", filepath.Join(t.TempDir(), "nope")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--models-dir") {
		t.Fatalf("err = %v, output %q: want a refusal naming --models-dir", err, out)
	}
}
