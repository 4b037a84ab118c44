package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
	"github.com/inference-cache/inference-cache/tlsconfig/tlstest"
)

// securedCluster is a one-node cluster that requires mutual TLS and a
// token of every class (docs/security.md), with the files a client needs.
type securedCluster struct {
	*cluster
	pki                     tlstest.Set
	write, admin, lookupTok string // token files
}

func startSecuredCluster(t *testing.T) *securedCluster {
	t.Helper()
	dir := t.TempDir()
	pki, err := tlstest.WriteSet(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	s := &securedCluster{pki: pki}
	for name, dst := range map[string]*string{"write": &s.write, "admin": &s.admin, "lookup": &s.lookupTok} {
		*dst = filepath.Join(dir, name+".token")
		if err := os.WriteFile(*dst, []byte(name+"-secret-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tc, err := client.TLSFiles(pki.CA, pki.ClientCert, pki.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc)), grpc.WithPerRPCCredentials(client.BearerToken("admin-secret-token"))}
	s.cluster = startClusterDial(t, 1, dial, "--tls-cert", pki.NodeCert, "--tls-key", pki.NodeKey, "--tls-ca", pki.CA,
		"--tls-client-auth", "require-and-verify", "--write-token-file", s.write, "--admin-token-file", s.admin, "--lookup-token-file", s.lookupTok)
	return s
}

// runCmd runs the binary with args and env (added to the test's), within
// a minute, and returns its combined output and error.
func runCmd(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A standalone subscriber feeds a cluster that requires mutual TLS and
// tokens when given the shared client flags and the token's variable
// (docs/security.md).
func TestSubscribe_FeedsAClusterThatRequiresMTLSAndTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a subscriber process")
	}
	s := startSecuredCluster(t)
	n := s.procs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A second replica: a prefix of a lone replica ranks as no hint.
	if _, err := n.ic.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("other", tenant, toks(70000, 16))}}); err != nil {
		t.Fatal(err)
	}
	pub, err := vllmpub.New(vllmpub.Options{Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	cfg := filepath.Join(t.TempDir(), "engines.yaml")
	yaml := fmt.Sprintf("engines:\n  - endpoint: %s\n    replay_endpoint: %s\n    replica_id: eng-a\n    model_id: %s\n    tenant_id: %s\n    hash_scheme: %s\n    block_size: 16\n",
		pub.Endpoint(), pub.ReplayEndpoint(), model, tenant, scheme)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := s.pc.Add(proccluster.Spec{Name: "subscriber", LogPath: filepath.Join(t.TempDir(), "subscriber.log"),
		Args: []string{"subscribe", "--config", cfg, "--addr", n.grpc, "--tls-ca", s.pki.CA, "--tls-cert", s.pki.ClientCert, "--tls-key", s.pki.ClientKey},
		Env:  []string{"INFERENCE_CACHE_TOKEN=write-secret-token"}})
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- subscriber log ---\n%s", sub.LogTail(6000))
		}
	})
	if err := pub.WaitSubscribed(t.Context(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	hs := make([]uint64, 8)
	for i := range hs {
		hs[i] = uint64(1000 + i)
	}
	if _, err := pub.Publish(ot.Batch(float64(time.Now().UnixMilli())/1000, -1, ot.Stored(ot.Hashes(hs...), nil, chainA, 16, nil, "GPU", nil))); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := n.ic.LookupRoute(ctx, lookupReq(tenant, chainA))
		return err == nil && r.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH && r.GetReplicas()[0].GetReplicaId() == "eng-a",
			fmt.Sprintf("lookup %v %v %q", err, r.GetReasonCode(), r.GetDetail())
	})
	// The subscriber records its stream position with the write token.
	poll.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ps, err := n.ic.GetStreamPositions(ctx, &pb.GetStreamPositionsRequest{ReplicaIds: []string{"eng-a"}})
		return err == nil && len(ps.GetPositions()) == 1, fmt.Sprintf("positions %v, %v", ps, err)
	})
}

// Against a secured cluster, subscribe and the CLI stop with the cause in
// words: the token refused, the TLS handshake refused (another CA, no
// client certificate), a TLS node dialled plaintext; a right token in the
// variable works.
func TestSecuredCluster_ErrorsNameTheCause(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	s := startSecuredCluster(t)
	n := s.procs[0]
	cfg := filepath.Join(t.TempDir(), "engines.yaml")
	if err := os.WriteFile(cfg, []byte("engines:\n  - endpoint: tcp://127.0.0.1:1\n    replica_id: eng-a\n    model_id: m\n    hash_scheme: vllm\n    block_size: 16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mtls := []string{"--tls-ca", s.pki.CA, "--tls-cert", s.pki.ClientCert, "--tls-key", s.pki.ClientKey}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"subscribe without a token", nil, append([]string{"subscribe", "--config", cfg, "--addr", n.grpc}, mtls...), "token refused (UNAUTHENTICATED)"},
		{"subscribe with a wrong token", []string{"INFERENCE_CACHE_TOKEN=nope"}, append([]string{"subscribe", "--config", cfg, "--addr", n.grpc}, mtls...), "token refused (UNAUTHENTICATED)"},
		{"subscribe with the lookup token", []string{"INFERENCE_CACHE_TOKEN=lookup-secret-token"}, append([]string{"subscribe", "--config", cfg, "--addr", n.grpc}, mtls...), "PERMISSION_DENIED"},
		{"subscribe over plaintext", []string{"INFERENCE_CACHE_TOKEN=write-secret-token"}, []string{"subscribe", "--config", cfg, "--addr", n.grpc}, "serves TLS and this command dialled plaintext"},
		{"subscribe trusting another CA", []string{"INFERENCE_CACHE_TOKEN=write-secret-token"}, []string{"subscribe", "--config", cfg, "--addr", n.grpc, "--tls-ca", s.pki.OtherCA, "--tls-cert", s.pki.ClientCert, "--tls-key", s.pki.ClientKey}, "not signed by a CA of --tls-ca"},
		{"subscribe without a client certificate", []string{"INFERENCE_CACHE_TOKEN=write-secret-token"}, []string{"subscribe", "--config", cfg, "--addr", n.grpc, "--tls-ca", s.pki.CA}, "requires a client certificate"},
		{"status over plaintext", nil, []string{"status", "--addr", n.grpc}, "serves TLS and this command dialled plaintext"},
		{"status without a token", nil, append([]string{"status", "--addr", n.grpc}, mtls...), "token refused (UNAUTHENTICATED)"},
		{"status at the Raft port", nil, []string{"status", "--addr", n.raft}, "not a gRPC port"},
	} {
		out, err := runCmd(t, c.env, c.args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: err %v, output:\n%s\nwant it to fail naming %q", c.name, err, out, c.want)
		}
	}
	out, err := runCmd(t, []string{"INFERENCE_CACHE_TOKEN=admin-secret-token"}, append([]string{"status", "--addr", n.grpc}, mtls...)...)
	if err != nil || !strings.Contains(out, "Leader") {
		t.Errorf("status with the admin token in INFERENCE_CACHE_TOKEN: %v\n%s", err, out)
	}
}
