package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/prompt"
)

// hintServer answers every LookupRoute with a canned PREFIX_MATCH for
// replica a and the loads of both replicas, the way a cluster node
// answers (served_by set).
type hintServer struct {
	pb.UnimplementedInferenceCacheServer
}

func (hintServer) LookupRoute(_ context.Context, req *pb.LookupRouteRequest) (*pb.LookupRouteResponse, error) {
	n := uint32(len(req.GetBlockHashes()))
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: "n1",
		Replicas: []*pb.ReplicaHint{{ReplicaId: "a", MatchedTokens: n * 16 / 2, MatchedBlocks: n / 2, Score: 1}},
		Loads:    []*pb.ReplicaLoad{{ReplicaId: "a", RunningRequests: 1}, {ReplicaId: "b"}}}, nil
}

// chat4k is a chat body of about 4,000 Qwen3 tokens (a long system prompt
// and eight turns) whose words vary with seed.
func chat4k(seed int) string {
	r := rand.New(rand.NewPCG(uint64(seed), 11))
	words := strings.Fields("The prefix cache keeps the attention keys and values of a prompt's leading blocks, so a request that shares them skips their prefill.")
	sentence := func() string {
		w := make([]string, len(words))
		for i, x := range words {
			w[i] = x + fmt.Sprintf("%c%c", 'a'+rune(r.IntN(26)), 'a'+rune(r.IntN(26)))
		}
		return strings.Join(w, " ") + " "
	}
	var sys strings.Builder
	for range 96 {
		sys.WriteString(sentence())
	}
	msgs := []map[string]any{{"role": "system", "content": sys.String()}}
	for i := range 8 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		var turn strings.Builder
		for range 6 {
			turn.WriteString(sentence())
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("Turn %d. %s", i, turn.String())})
	}
	b, _ := json.Marshal(map[string]any{"model": "qwen3", "max_tokens": 1, "messages": msgs})
	return string(b)
}

// cannedAnswer is a non-streamed chat response as the sim engine (and
// vLLM) sends it.
const cannedAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen3","choices":[{"index":0,"message":{"role":"assistant","content":" tok","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"length","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":3981,"total_tokens":3982,"completion_tokens":1,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`

// BenchmarkProxy_Chat4kTokens is one 4,000-token chat request sent
// straight to an engine ("direct") and through the proxy ("proxy"), in
// the same run, against the same engine: a handler that reads the body
// and answers a canned response at once. Through the proxy the request is
// read, decoded, rendered with Qwen3's template, tokenized, fingerprinted,
// looked up over gRPC (a server answering a canned PREFIX_MATCH),
// picked, forwarded and relayed. With -cpu 1 everything runs on one core
// and the two cpu-ns/op (the process's CPU time per request) differ by
// the proxy's CPU per request; 64 prompts of distinct words are cycled,
// so the tokenizer's word cache mostly misses (the worst case).
func BenchmarkProxy_Chat4kTokens(b *testing.B) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if r.URL.Path == "/v1/models" {
				_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"qwen3","object":"model"}]}`)
			}
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, cannedAnswer)
	}))
	defer engine.Close()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterInferenceCacheServer(gs, hintServer{})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cl, err := client.New(client.Config{Addrs: []string{lis.Addr().String()}, LookupTimeout: gateway.DefaultLookupBudget})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	reg := prompt.New(fixtures.ModelsDir(b, "qwen3"), prompt.Options{})
	if err := reg.Preload(context.Background(), "qwen3"); err != nil {
		b.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Prompts: reg, Lookup: cl})
	if err != nil {
		b.Fatal(err)
	}
	pool := NewPool(PoolOptions{HealthInterval: time.Hour, Logger: quiet})
	defer pool.Close()
	if err := pool.Set([]Backend{{ReplicaID: "a", URL: engine.URL, Model: "qwen3"}, {ReplicaID: "b", URL: engine.URL, Model: "qwen3"}}); err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{Gateway: gw, Pool: pool, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()

	bodies := make([]string, 64)
	for i := range bodies {
		bodies[i] = chat4k(i + 1)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	post := func(b *testing.B, url, body string) {
		resp, err := hc.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	// The proxy really looks up and matches (not a benchmark of LOAD).
	resp, err := hc.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(bodies[0]))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(HeaderReason) != "PREFIX_MATCH" || resp.Header.Get(HeaderReplica) != "a" {
		b.Fatalf("proxy decision %s %s, want PREFIX_MATCH a", resp.Header.Get(HeaderReason), resp.Header.Get(HeaderReplica))
	}
	for _, c := range []struct{ name, url string }{
		{"direct", engine.URL + "/v1/chat/completions"},
		{"proxy", front.URL + "/v1/chat/completions"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			cpu0 := processCPU(b)
			for b.Loop() {
				post(b, c.url, bodies[i%len(bodies)])
				i++
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(i), "cpu-ns/op")
		})
	}
}

// processCPU is the process's user + system CPU time so far: with the
// whole path in one process it counts the proxy's, the engine's and the
// client's work, and not the machine's other load.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
