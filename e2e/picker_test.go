package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inference-cache/inference-cache/internal/extproctest"
	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
	"github.com/inference-cache/inference-cache/openai"
)

// pickerProc is a running endpoint picker: its ext_proc address, a
// connection to it, its metrics URL and each endpoint's address.
type pickerProc struct {
	*proccluster.Proc
	conn    *grpc.ClientConn
	metrics string
	addr    map[string]string // replica id → ip:port
}

// startPicker starts `inference-cache picker` over the fleet's engines
// (static endpoints ip:port=replica id), cluster and models.
func (f *fleet) startPicker(name string, extra ...string) *pickerProc {
	return f.startPickerWith(name, true, extra...)
}

// startPickerWith starts a picker, asking the cluster for hints or not,
// with extra flags.
func (f *fleet) startPickerWith(name string, lookups bool, extra ...string) *pickerProc {
	f.t.Helper()
	ext, health, metrics := freeport.MustAddr(f.t), freeport.MustAddr(f.t), freeport.MustAddr(f.t)
	p := &pickerProc{metrics: "http://" + metrics + "/metrics", addr: map[string]string{}}
	args := append([]string{"picker", "--listen", ext, "--health-listen", health, "--metrics-listen", metrics, "--models-dir", f.modelsDir, "--drain-time", "0s"}, extra...)
	for _, n := range f.c.procs {
		if lookups {
			args = append(args, "--addr", n.grpc)
		}
	}
	for _, s := range f.sims {
		a := strings.TrimPrefix(s.url, "http://")
		p.addr[s.id] = a
		args = append(args, "--endpoint", a+"="+s.id)
	}
	p.Proc = f.pc.Add(proccluster.Spec{Name: name, Args: args, LogPath: filepath.Join(f.dir, name+".log")})
	if err := p.Start(); err != nil {
		f.t.Fatal(err)
	}
	waitHTTP(f.t, p.metrics, 30*time.Second)
	conn, err := grpc.NewClient(ext, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	p.conn = conn
	return p
}

// replicaAt is the replica id of the endpoint at addr.
func (p *pickerProc) replicaAt(addr string) string {
	for id, a := range p.addr {
		if a == addr {
			return id
		}
	}
	return ""
}

// viaPicker plays Envoy for one chat request: the request phase through
// the picker, the body sent to the first endpoint of its answer, and
// the engine's response (its headers and body) through the picker's
// response phase, naming that endpoint as the one that served. It
// returns the picker's answers and the engine's decoded response.
func viaPicker(t *testing.T, p *pickerProc, req extproctest.Request) (extproctest.Pick, *extproctest.Answered, openai.ChatCompletionResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req.Path = "/v1/chat/completions"
	x, err := extproctest.Start(ctx, p.conn, req)
	if err != nil {
		t.Fatal(err)
	}
	var c openai.ChatCompletionResponse
	if x.Pick.Immediate != nil {
		_ = x.CloseSend()
		return x.Pick, nil, c
	}
	first, _, _ := strings.Cut(x.Pick.Destination, ",")
	body := x.Pick.Body
	if req.Mode == filterv3.ProcessingMode_BUFFERED {
		body = req.Body
	}
	resp, err := http.Post("http://"+first+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &c) != nil {
		t.Fatalf("engine at %s: %d %s", first, resp.StatusCode, raw)
	}
	a, err := x.Respond(extproctest.Response{ContentType: resp.Header.Get("Content-Type"), Served: first, Chunks: [][]byte{raw}})
	if err != nil {
		t.Fatal(err)
	}
	return x.Pick, a, c
}

// The endpoint picker end to end over real processes: a 3-node cluster,
// three sim engines publishing KV events, the subscriber, and the picker
// driven as Envoy drives it (internal/extproctest).
func TestPicker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and the picker")
	}
	f := startFleet(t, fleetOptions{sims: 3})
	// The subtests are about what a hint does, not the lookup's budget:
	// under -race on a loaded machine a lookup can outlast the default
	// 20 ms and the pick falls back to load.
	p := f.startPicker("picker", "--lookup-budget", "1s")
	fd := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	var warm string
	sys := longSystem("endpoint-picker")

	t.Run("HealthServicesByName", func(t *testing.T) {
		hc := healthpb.NewHealthClient(p.conn)
		for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%q: %v %v", svc, r, err)
			}
		}
	})
	t.Run("RepeatedPrefixGoesToTheWarmEndpointTheOthersAsFallbacks", func(t *testing.T) {
		first := chatBody(sys, "What is a KV cache?", 1, false)
		pk, a, c := viaPicker(t, p, extproctest.Request{Mode: fd, ResponseMode: fd, Body: []byte(first), ChunkSize: 512})
		dest := strings.Split(pk.Destination, ",")
		warm = p.replicaAt(dest[0])
		if warm == "" || a.Headers["x-inference-cache-replica"] != warm || c.Usage.CachedTokens() != 0 {
			t.Fatalf("first: destination %q, answer %v, %d cached tokens", pk.Destination, a.Headers, c.Usage.CachedTokens())
		}
		f.waitIndexed(first, warm, 20*time.Second)

		pk, a, c = viaPicker(t, p, extproctest.Request{Mode: fd, ResponseMode: fd, Body: []byte(chatBody(sys, "And a prefix cache?", 1, false)), ChunkSize: 512})
		dest = strings.Split(pk.Destination, ",")
		if dest[0] != p.addr[warm] || a.Headers["x-inference-cache-reason"] != "PREFIX_MATCH" || pk.Headers["x-gateway-destination-endpoint"] != pk.Destination {
			t.Fatalf("second: destination %q (header %q), reason %q; want %s (%s) first by PREFIX_MATCH", pk.Destination,
				pk.Headers["x-gateway-destination-endpoint"], a.Headers["x-inference-cache-reason"], warm, p.addr[warm])
		}
		if c.Usage.CachedTokens() < 160 {
			t.Fatalf("the warm engine found %d cached tokens", c.Usage.CachedTokens())
		}
		// The pick, then the two other endpoints, each once.
		all := slices.Sorted(func(yield func(string) bool) {
			for _, a := range p.addr {
				if !yield(a) {
					return
				}
			}
		})
		if got := slices.Sorted(slices.Values(dest)); len(dest) != 3 || !slices.Equal(got, all) {
			t.Fatalf("destination %q, want the pick then the 2 other endpoints", pk.Destination)
		}
	})
	t.Run("SubsetHintIsHonoured", func(t *testing.T) {
		var others []string
		for id, a := range p.addr {
			if id != warm {
				others = append(others, a)
			}
		}
		for _, mode := range []filterv3.ProcessingMode_BodySendMode{fd, filterv3.ProcessingMode_BUFFERED} {
			pk, _, _ := viaPicker(t, p, extproctest.Request{Mode: mode, ResponseMode: mode, Body: []byte(chatBody(sys, "Subset?", 1, false)), Subset: others})
			got := slices.Sorted(slices.Values(strings.Split(pk.Destination, ",")))
			if !slices.Equal(got, slices.Sorted(slices.Values(others))) {
				t.Fatalf("%v: destination %q, want only the subset %v (not the warm %s)", mode, pk.Destination, others, warm)
			}
		}
	})
	t.Run("EmptySubsetIs503", func(t *testing.T) {
		pk, _, _ := viaPicker(t, p, extproctest.Request{Mode: fd, ResponseMode: fd, Body: []byte(chatBody(sys, "None?", 1, false)), Subset: []string{}})
		if pk.Immediate.GetStatus().GetCode() != typev3.StatusCode_ServiceUnavailable {
			t.Fatalf("answer %+v, want an ImmediateResponse 503", pk)
		}
	})
	t.Run("FallbacksInOrderOfLoad", func(t *testing.T) {
		// A request held open (its response never comes) keeps its
		// prefill queued on its endpoint: a new request without a hint
		// lists that endpoint last among its fallbacks.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		held, err := extproctest.Start(ctx, p.conn, extproctest.Request{Mode: fd, ResponseMode: fd, Path: "/v1/chat/completions",
			Body: []byte(chatBody(longSystem("held-open"), "Hold?", 1, false))})
		if err != nil {
			t.Fatal(err)
		}
		defer held.CloseSend()
		busy, _, _ := strings.Cut(held.Pick.Destination, ",")
		pk, _, _ := viaPicker(t, p, extproctest.Request{Mode: fd, ResponseMode: fd, Body: []byte(chatBody(longSystem("fresh"), "Order?", 1, false))})
		dest := strings.Split(pk.Destination, ",")
		if len(dest) != 3 || dest[2] != busy || dest[0] == busy {
			t.Fatalf("destination %q with %s busy: want it last", pk.Destination, busy)
		}
	})
	t.Run("OneCharacterBodiesKeepMemoryBounded", func(t *testing.T) { checkPickerMemory(t, f) })
	t.Run("FailOpenWithTheClusterDown", func(t *testing.T) {
		for _, n := range f.c.procs {
			n.Kill()
		}
		before := metricSum(t, p.metrics, "inference_cache_picker_fail_open_picks_total")
		for i := 0; i < 4; i++ {
			begin := time.Now()
			pk, a, c := viaPicker(t, p, extproctest.Request{Mode: fd, ResponseMode: fd, Body: []byte(chatBody(sys, "Down?", 1, false))})
			// By load, or by the picker's own provisional pick of this
			// prefix from the subtests before (contract §5.12), which needs
			// no cluster; the fail-open count below shows no node answered.
			if reason := a.Headers["x-inference-cache-reason"]; pk.Destination == "" || (reason != "LOAD" && reason != "PREFIX_MATCH") || len(c.Choices) != 1 {
				t.Fatalf("request %d with the cluster down: %+v %v", i, pk, a.Headers)
			}
			if took := time.Since(begin); took > 5*time.Second {
				t.Fatalf("request %d took %v", i, took)
			}
		}
		if n := metricSum(t, p.metrics, "inference_cache_picker_fail_open_picks_total"); n-before != 4 {
			t.Fatalf("fail_open_picks_total grew by %v, want 4", n-before)
		}
	})
}

// Three concurrent 20 MB chat bodies of one repeated character, sent as
// Envoy sends a body (64 KiB messages), keep a fresh picker's peak RSS
// (VmHWM) within 400 MB, and its RSS is back near its start within 60 s.
func checkPickerMemory(t *testing.T, f *fleet) {
	p := f.startPicker("picker-memory")
	pid := p.Pid()
	base := rssKB(t, pid, "VmRSS")
	body := oneCharacterChat(20 << 20)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			x, err := extproctest.Start(ctx, p.conn, extproctest.Request{Mode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
				Path: "/v1/chat/completions", Body: body, ChunkSize: 64 << 10})
			if err != nil {
				t.Errorf("body %d: %v", i, err)
				return
			}
			_ = x.CloseSend()
		}()
	}
	wg.Wait()
	peak := rssKB(t, pid, "VmHWM")
	if peak > 400<<10 {
		t.Errorf("peak RSS %d MB with three 20 MB one-character bodies, want at most 400 MB", peak>>10)
	}
	var now int64
	poll.Eventually(t, 60*time.Second, 500*time.Millisecond, func() (bool, string) {
		now = rssKB(t, pid, "VmRSS")
		return now < base+64<<10, fmt.Sprintf("RSS %d MB after the bodies, started at %d MB: the memory was not returned", now>>10, base>>10)
	})
	t.Logf("picker RSS at start %d MB, peak %d MB, after %d MB", base>>10, peak>>10, now>>10)
}
