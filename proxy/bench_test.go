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

// chatSizes are chat4k's sentences in the system prompt and in each turn,
// by suffix letters: about 4,000 Qwen3 tokens each.
var chatSizes = map[int]struct{ system, turn int }{2: {52, 3}, 4: {35, 2}}

// chat4k is a chat body of about 4,000 Qwen3 tokens (a long system prompt
// and eight turns) whose words vary with seed: each of the sentence's 23
// words gets a suffix of letters random letters (2: about 15,500 words
// over all seeds, which the tokenizer's word cache holds; 4: words that
// repeat too seldom to stay in it).
func chat4k(seed, letters int) string {
	r := rand.New(rand.NewPCG(uint64(seed), 11))
	words := strings.Fields("The prefix cache keeps the attention keys and values of a prompt's leading blocks, so a request that shares them skips their prefill.")
	sentence := func() string {
		w := make([]string, len(words))
		for i, x := range words {
			suffix := make([]byte, letters)
			for k := range suffix {
				suffix[k] = byte('a' + r.IntN(26))
			}
			w[i] = x + string(suffix)
		}
		return strings.Join(w, " ") + " "
	}
	size := chatSizes[letters]
	var sys strings.Builder
	for range size.system {
		sys.WriteString(sentence())
	}
	msgs := []map[string]any{{"role": "system", "content": sys.String()}}
	for i := range 8 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		var turn strings.Builder
		for range size.turn {
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
// the proxy's CPU per request. 64 prompts of distinct words are cycled:
// for "proxy" their words, about 15,500 in all, are sent once before and
// stay in the tokenizer's word cache (so every word hits, as for text in
// the words of earlier traffic); for "proxy_new_words" almost every word is one the
// cache does not hold, so each goes through the BPE merges (the worst
// case).
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

	bodies, newWords := make([]string, 64), make([]string, 64)
	for i := range bodies {
		bodies[i], newWords[i] = chat4k(i+1, 2), chat4k(i+1, 4)
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
	// Every word of "proxy" seen once, and the client's connection to the
	// hint server up (its first lookup, dialling, can overrun the lookup
	// budget on a loaded machine and be picked by LOAD).
	for _, body := range bodies {
		post(b, front.URL+"/v1/chat/completions", body)
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
	for _, c := range []struct {
		name, url string
		bodies    []string
	}{
		{"direct", engine.URL + "/v1/chat/completions", bodies},
		{"proxy", front.URL + "/v1/chat/completions", bodies},
		{"proxy_new_words", front.URL + "/v1/chat/completions", newWords},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			cpu0 := processCPU(b)
			for b.Loop() {
				post(b, c.url, c.bodies[i%len(c.bodies)])
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
