package api

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// servingNode starts a one-node cluster and waits until it is Serving.
func servingNode(t *testing.T) *raftnode.Node {
	t.Helper()
	c := clustertest.New(t, 1, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = -1 })
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	n := c.Nodes[0].Node
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		return n.Serving(), fmt.Sprintf("one-node cluster not Serving: read state %+v", n.ReadState())
	})
	return n
}

// serveAPI serves srv on loopback and returns a connection to it.
func serveAPI(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func healthOf(t *testing.T, cc *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func readyzCode(srv *Server) int {
	rec := httptest.NewRecorder()
	metrics.NewMux(nil, srv.Ready, false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code
}

// A server given a models directory reports not ready (gRPC health and
// /readyz) while the tokenizers load, even though its node is Serving;
// once they have loaded, the first prompt_text lookup is tokenized and
// matched instead of answering "loading". A malformed and an unsupported
// tokenizer.json in the directory are logged and skipped: readiness
// still comes.
func TestServer_NotReadyUntilTokenizersLoad(t *testing.T) {
	dir := modelsDirWith(t) // qwen3 (the reference tokenizer) and wordpiece (unsupported)
	if err := os.Mkdir(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken", "tokenizer.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	entered := make(chan string, 8)
	release := make(chan struct{})
	reg := tokenizer.NewRegistry(dir, tokenizer.RegistryOptions{Loader: func(d string, o tokenizer.LoadOptions) (*tokenizer.Tokenizer, error) {
		entered <- filepath.Base(d)
		<-release
		return tokenizer.LoadDir(d, o)
	}})
	node := servingNode(t)
	logs := &syncbuf.Buffer{}
	srv := NewServer(ServerConfig{Node: node, Tokenizer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	cc := serveAPI(t, srv)

	select {
	case m := <-entered:
		if m != "broken" { // Models order: broken, qwen3, wordpiece
			t.Fatalf("first preloaded model %q, want broken", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not start loading the models directory's tokenizers")
	}
	srv.syncHealth() // what the health watcher does every healthPoll
	if !node.Serving() || srv.Ready() {
		t.Fatalf("while loading: node Serving %v, server Ready %v; want true, false", node.Serving(), srv.Ready())
	}
	if st := healthOf(t, cc); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health while loading: %v, want NOT_SERVING", st)
	}
	if code := readyzCode(srv); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while loading: %d, want 503", code)
	}

	close(release)
	poll.Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		st := healthOf(t, cc)
		return st == healthpb.HealthCheckResponse_SERVING, fmt.Sprintf("gRPC health %v after the loads, want SERVING", st)
	})
	if !srv.Ready() || readyzCode(srv) != http.StatusOK {
		t.Fatalf("after the loads: Ready %v, /readyz %d", srv.Ready(), readyzCode(srv))
	}
	if n := reg.Loads(); n != 3 {
		t.Fatalf("registry loaded %d tokenizers, want 3 (every model of the directory once)", n)
	}
	out := logs.String()
	for _, want := range []string{"model_id=broken", "model_id=wordpiece", "model_id=qwen3"} {
		if !strings.Contains(out, want) {
			t.Errorf("log does not mention %s:\n%s", want, out)
		}
	}
	if !strings.Contains(out, `msg="tokenizer skipped: its prompt_text lookups answer NO_HINT" model_id=broken`) {
		t.Errorf("the malformed tokenizer is not logged as skipped:\n%s", out)
	}

	// The prompt's chain, tokenized by a tokenizer of the test's own (not
	// the server's registry, which must have loaded it already).
	ref, err := tokenizer.LoadDir(filepath.Join(dir, "qwen3"), tokenizer.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := strings.Repeat("You are a helpful assistant. Answer briefly and cite sources. ", 10)
	ids, err := ref.Encode(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	ic := pb.NewInferenceCacheClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ing, err := ic.Ingest(ctx, &pb.IngestRequest{RequestId: "seed", Events: []*pb.BlockEvent{
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-warm", HashScheme: "vllm", ModelId: "qwen3", TenantId: "t", TokenIds: ids, BlockSize: 16},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-other", HashScheme: "vllm", ModelId: "qwen3", TenantId: "t", TokenIds: make([]uint32, 16), BlockSize: 16},
	}})
	if err != nil || ing.Accepted != 2 {
		t.Fatalf("ingest: %v %v", ing, err)
	}
	// The budget is not what this test is about: under a loaded -race run
	// tokenizing can outlast the default 10 ms, and the lookup would fail
	// open (TestLookupRoute_PromptTextTokenizingStopsAtTheBudget owns that).
	// Set through the API, which drops the copy of the policy the service
	// keeps for lookups (the ingest above read it).
	pol := node.Policy()
	pol.LookupTimeout = 10 * time.Second
	if _, err := ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: PolicyToPB(pol)}); err != nil {
		t.Fatal(err)
	}
	loads := reg.Loads()
	r, err := ic.LookupRoute(ctx, &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "qwen3", TenantId: "t", PromptText: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(r.Replicas) == 0 || r.Replicas[0].ReplicaId != "r-warm" {
		t.Fatalf("first prompt_text lookup after readiness: %v %q %v, want PREFIX_MATCH led by r-warm", r.ReasonCode, r.Detail, r.Replicas)
	}
	if want := uint32(len(ids) / 16 * 16); r.Replicas[0].MatchedTokens != want {
		t.Errorf("matched %d tokens, want %d", r.Replicas[0].MatchedTokens, want)
	}
	if reg.Loads() != loads {
		t.Errorf("the first lookup loaded a tokenizer: it was not preloaded")
	}
}

// A load that does not finish delays readiness only up to
// TokenizerLoadTimeout: the node then reports ready, saying in the log
// which tokenizer is still loading.
func TestServer_ReadyAfterTokenizerLoadTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	reg := tokenizer.NewRegistry(modelsDirWith(t), tokenizer.RegistryOptions{Loader: func(d string, o tokenizer.LoadOptions) (*tokenizer.Tokenizer, error) {
		<-release
		return tokenizer.LoadDir(d, o)
	}})
	node := servingNode(t)
	logs := &syncbuf.Buffer{}
	start := time.Now()
	srv := NewServer(ServerConfig{Node: node, Tokenizer: reg, TokenizerLoadTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	cc := serveAPI(t, srv)
	select {
	case <-srv.TokenizersLoaded():
	case <-time.After(10 * time.Second):
		t.Fatal("readiness still waits for the tokenizers 10 s after a 300 ms limit")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("stopped waiting after %v, before the 300 ms limit", took)
	}
	poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
		st := healthOf(t, cc)
		return st == healthpb.HealthCheckResponse_SERVING, fmt.Sprintf("gRPC health %v after the limit, want SERVING", st)
	})
	const still = `msg="tokenizer still loading at the readiness time limit; ready without it" model_id=qwen3`
	poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, still), fmt.Sprintf("no log line %s in:\n%s", still, out)
	})
}

// stuckPreloader never returns until released, whatever its context.
type stuckPreloader struct{ release chan struct{} }

func (p stuckPreloader) EncodeContext(context.Context, string, string, int) ([]uint32, error) {
	return nil, tokenizer.ErrLoading
}

func (p stuckPreloader) Preload(context.Context) ([]tokenizer.ModelLoad, error) {
	<-p.release
	return nil, nil
}

// The time limit holds even for a Preloader that ignores its context.
func TestServer_TokenizerLoadTimeoutHoldsForAStuckPreloader(t *testing.T) {
	p := stuckPreloader{release: make(chan struct{})}
	defer close(p.release)
	srv := NewServer(ServerConfig{Node: servingNode(t), Tokenizer: p, TokenizerLoadTimeout: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil))})
	serveAPI(t, srv)
	select {
	case <-srv.TokenizersLoaded():
	case <-time.After(10 * time.Second):
		t.Fatal("readiness waits on a stuck preload past its 100 ms limit")
	}
	poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
		return srv.Ready(), "server not Ready after the tokenizer load limit"
	})
}
