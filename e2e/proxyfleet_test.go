package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// fleetModel is the model every sim engine serves: the reference Qwen3
// tokenizer and chat template.
const fleetModel = "qwen3"

// fleet is a whole routing path as real processes: a 3-node cluster, sim
// engines publishing KV events, the subscriber feeding the cluster, and
// the proxy in front of the engines.
type fleet struct {
	t         *testing.T
	c         *cluster
	pc        *proccluster.Cluster
	dir       string
	modelsDir string
	sims      []*simProc
	sub       *proccluster.Proc
	proxy     *httpProc
	prompts   *prompt.Registry
}

// simProc is one sim engine: its replica id, HTTP base URL and KV-event
// endpoint.
type simProc struct {
	id, url, events string
	*proccluster.Proc
}

// httpProc is a process serving HTTP at url.
type httpProc struct {
	url string
	*proccluster.Proc
}

// fleetOptions shape a fleet.
type fleetOptions struct {
	// sims is the number of sim engines; simFlags are added to each one's
	// command line (after the defaults, so they override them).
	sims     int
	simFlags []string
	// proxyFlags are added to the proxy's command line, proxyEnv to its
	// environment.
	proxyFlags, proxyEnv []string
}

// startFleet starts the cluster, the sim engines, the subscriber and the
// proxy.
func startFleet(t *testing.T, o fleetOptions) *fleet {
	t.Helper()
	f := &fleet{t: t, c: startCluster(t, 3), pc: proccluster.New(proccluster.Options{Binary: binPath}), dir: t.TempDir(),
		modelsDir: fixtures.ModelsDir(t, fleetModel)}
	f.prompts = prompt.New(f.modelsDir, prompt.Options{})
	t.Cleanup(func() {
		f.pc.StopAll(10 * time.Second)
		if t.Failed() {
			for _, p := range f.pc.Procs() {
				t.Logf("--- log tail of %s ---\n%s", p.Name(), p.LogTail(4000))
			}
		}
	})
	var yaml strings.Builder
	yaml.WriteString("scrape_interval: 1s\nengines:\n")
	for i := 0; i < o.sims; i++ {
		s := &simProc{id: fmt.Sprintf("sim-%d", i), url: "http://" + freeport.MustAddr(t), events: "tcp://" + freeport.MustAddr(t)}
		args := []string{"sim-engine", "--replica-id", s.id, "--model", fleetModel, "--models-dir", f.modelsDir,
			"--listen", strings.TrimPrefix(s.url, "http://"), "--kv-events-bind", s.events,
			"--prefill-tps", "200000", "--decode-tps", "50", "--kv-blocks", "4096"}
		s.Proc = f.pc.Add(proccluster.Spec{Name: s.id, LogPath: filepath.Join(f.dir, s.id+".log"), Args: append(args, o.simFlags...)})
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		f.sims = append(f.sims, s)
		fmt.Fprintf(&yaml, "  - endpoint: %s\n    replica_id: %s\n    model_id: %s\n    hash_scheme: vllm\n    block_size: 16\n    metrics_url: %s/metrics\n",
			s.events, s.id, fleetModel, s.url)
	}
	for _, s := range f.sims {
		waitHTTP(t, s.url+"/health", 30*time.Second)
	}
	cfg := filepath.Join(f.dir, "engines.yaml")
	if err := os.WriteFile(cfg, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"subscribe", "--config", cfg}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	f.sub = f.pc.Add(proccluster.Spec{Name: "subscriber", Args: args, LogPath: filepath.Join(f.dir, "subscriber.log")})
	if err := f.sub.Start(); err != nil {
		t.Fatal(err)
	}
	args = []string{"--models-dir", f.modelsDir}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	for _, s := range f.sims {
		args = append(args, "--backend", s.id+"="+s.url)
	}
	f.proxy = f.startProxy("proxy", o.proxyEnv, append(args, o.proxyFlags...)...)
	return f
}

// startProxy starts a proxy process with flags (and env added to its
// environment) and waits until it is healthy. It drains for no time on
// SIGTERM unless flags give a --drain-time.
func (f *fleet) startProxy(name string, env []string, flags ...string) *httpProc {
	f.t.Helper()
	p := &httpProc{url: "http://" + freeport.MustAddr(f.t)}
	args := append([]string{"proxy", "--listen", strings.TrimPrefix(p.url, "http://"), "--drain-time", "0s"}, flags...)
	p.Proc = f.pc.Add(proccluster.Spec{Name: name, Args: args, Env: env, LogPath: filepath.Join(f.dir, name+".log")})
	if err := p.Start(); err != nil {
		f.t.Fatal(err)
	}
	waitHTTP(f.t, p.url+"/health", 30*time.Second)
	return p
}

// sim returns the sim engine of replica id.
func (f *fleet) sim(id string) *simProc {
	f.t.Helper()
	for _, s := range f.sims {
		if s.id == id {
			return s
		}
	}
	f.t.Fatalf("no sim engine %q", id)
	return nil
}

// waitHTTP waits until GET url answers 200.
func waitHTTP(t *testing.T, url string, limit time.Duration) {
	t.Helper()
	poll.Eventually(t, limit, 50*time.Millisecond, func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, fmt.Sprintf("%s not answering: %v", url, err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s answers %d, want 200", url, resp.StatusCode)
	})
}

// chatBody is a chat request for the fleet's model.
func chatBody(system, user string, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": fleetModel, "max_tokens": maxTokens, "stream": stream, "messages": []map[string]any{
		{"role": "system", "content": system}, {"role": "user", "content": user}}})
	return string(b)
}

// longSystem is a system prompt of several hundred tokens, distinct per
// topic.
func longSystem(topic string) string {
	return strings.Repeat("You are the "+topic+" assistant of a fleet whose engines keep the attention keys and values of earlier prompts. ", 12)
}

// postChat sends a non-streamed chat request through p and decodes the
// answer.
func postChat(t *testing.T, p *httpProc, body string) (*http.Response, openai.ChatCompletionResponse) {
	t.Helper()
	resp, err := http.Post(p.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r openai.ChatCompletionResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &r) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	return resp, r
}

// chatKey is the LookupRoute request the proxy makes for body's prompt
// (its tokens fingerprinted at the fleet's block size), under adapter
// ("" = the base model's), asking for up to maxReplicas hints (0 = the
// server's default).
func (f *fleet) chatKey(body, adapter string, maxReplicas uint32) *pb.LookupRouteRequest {
	f.t.Helper()
	req, err := openai.DecodeChat([]byte(body))
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := f.prompts.Tokens(context.Background(), req)
	if err != nil {
		f.t.Fatal(err)
	}
	lr := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: fleetModel, AdapterId: adapter, MaxReplicas: maxReplicas}
	if err := client.Fingerprint(lr, p.TokenIDs, 16); err != nil {
		f.t.Fatal(err)
	}
	return lr
}

// waitIndexed waits until the cluster's index says replica holds the
// prefill of body (the key the proxy computes), first among the holders,
// as the subscriber writes it from the engine's KV events.
func (f *fleet) waitIndexed(body, replica string, limit time.Duration) {
	f.t.Helper()
	f.waitMatch(f.chatKey(body, "", 0), replica, false, limit)
}

// waitIndexedOn waits until the index names replica among the holders of
// body's prompt (the decode engine holds it too once it pulled it).
func (f *fleet) waitIndexedOn(body, replica string, limit time.Duration) {
	f.t.Helper()
	f.waitMatch(f.chatKey(body, "", 8), replica, true, limit)
}

// waitIndexedAdapter waits until the index holds body's prompt (keyed as
// the base model's) under adapter on replica, first among the holders.
func (f *fleet) waitIndexedAdapter(body, adapter, replica string, limit time.Duration) {
	f.t.Helper()
	f.waitMatch(f.chatKey(body, adapter, 0), replica, false, limit)
}

// waitMatch waits until a running node answers lr with PREFIX_MATCH naming
// replica first (anyHolder: anywhere among the hints).
func (f *fleet) waitMatch(lr *pb.LookupRouteRequest, replica string, anyHolder bool, limit time.Duration) {
	f.t.Helper()
	poll.Eventually(f.t, limit, 100*time.Millisecond, func() (bool, string) {
		var r *pb.LookupRouteResponse
		ctx, cancel := ctxT(2 * time.Second)
		defer cancel()
		for _, n := range f.c.procs {
			if n.Running() {
				r, _ = n.ic.LookupRoute(ctx, lr)
				break
			}
		}
		if r.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH {
			for k, h := range r.GetReplicas() {
				if h.GetReplicaId() == replica && (k == 0 || anyHolder) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("the index does not match %s for the prompt: %v %q %v", replica, r.GetReasonCode(), r.GetDetail(), r.GetReplicas())
	})
}

// metricSum is the sum of the samples of name whose labels contain every
// label="value" of labels, from a Prometheus text page at url.
func metricSum(t *testing.T, url, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
next:
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%s: %q", name, sc.Text())
		}
		sum += v
	}
	return sum
}
