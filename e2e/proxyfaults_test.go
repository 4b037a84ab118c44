package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// The proxy against hostile clients and failing engines, over real
// processes: stalled request bodies, a paused engine, a SIGTERM under
// load, bodies of one repeated character, and an engine killed
// mid-stream. The subtests run in order; the last one kills an engine.
func TestProxyFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and proxies")
	}
	// Health checks far apart: a paused engine stays a candidate, so its
	// requests meet the first-byte timeout.
	f := startFleet(t, fleetOptions{sims: 3, proxyFlags: []string{"--health-interval", "1h",
		"--first-byte-timeout", "2s", "--body-idle-timeout", "2s", "--body-timeout", "4s"}})
	t.Run("StalledBodiesAreClosedWithinTheBodyTimeout", func(t *testing.T) { checkStalledBodies(t, f) })
	t.Run("PausedEngineRequestsRetriedElsewhere", func(t *testing.T) { checkPausedEngine(t, f) })
	t.Run("SIGTERMDrainsWithoutRefusingARequest", func(t *testing.T) { checkDrain(t, f) })
	t.Run("OneCharacterBodiesKeepMemoryBounded", func(t *testing.T) { checkOneCharacterBodies(t, f) })
	t.Run("KilledEngineMidStreamEndsWithAnErrorEvent", func(t *testing.T) { checkKilledMidStream(t, f) })
}

// proxyArgs are the flags of a proxy over f's cluster and engines.
func (f *fleet) proxyArgs() []string {
	args := []string{"--models-dir", f.modelsDir}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	for _, s := range f.sims {
		args = append(args, "--backend", s.id+"="+s.url)
	}
	return args
}

// 2,000 connections that send a body's headers and stop are all closed
// by the proxy within its body timeout (4 s; 2 s idle), with a 408, and a
// normal request meanwhile is answered.
func checkStalledBodies(t *testing.T, f *fleet) {
	const conns = 2000
	addr := strings.TrimPrefix(f.proxy.url, "http://")
	var closed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", closed.Load(), err)
		}
		_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, c) // until the proxy closes it
			closed.Add(1)
		}()
	}
	_, c := postChat(t, f.proxy, chatBody("You are terse.", "Say hi.", 2, false))
	if len(c.Choices) == 0 {
		t.Fatalf("a normal request during the stall: no choices")
	}
	wg.Wait()
	took := time.Since(start)
	if took > 4*time.Second+10*time.Second { // the body timeout, and slack for 2,000 closes on a loaded machine
		t.Errorf("the %d stalled bodies were closed after %v, want within the body timeout of 4 s", conns, took)
	}
	if n := metricSum(t, f.proxy.url+"/metrics", "inference_cache_proxy_body_timeouts_total"); n < conns {
		t.Errorf("body_timeouts_total %v, want %d", n, conns)
	}
}

// streamOnce posts a streamed chat through url and reads it to its end;
// it returns the response headers and the error of the read, if any.
func streamOnce(ctx context.Context, url, body string) (http.Header, int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK && !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		err = fmt.Errorf("stream ended without [DONE]: %q", b)
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp.Header, resp.StatusCode, err
}

// With an engine paused (SIGSTOP: it accepts connections and never
// answers), the streamed requests picked for it get no headers within
// the first-byte timeout (2 s) and are sent once to the next-best engine,
// where they succeed: every request succeeds, well before the engine
// resumes.
func checkPausedEngine(t *testing.T, f *fleet) {
	paused := f.sims[0]
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.Resume() }()
	const requests = 9
	var wg sync.WaitGroup
	var retried atomic.Int64
	errs := make(chan error, requests)
	start := time.Now()
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, _, err := streamOnce(context.Background(), f.proxy.url, chatBody(fmt.Sprintf("Paused engine, request %d.", i), "Hi.", 4, true))
			if err != nil {
				errs <- err
				return
			}
			if h.Get("X-Inference-Cache-Retried-From") == paused.id {
				retried.Add(1)
			}
			if h.Get("X-Inference-Cache-Replica") == paused.id {
				errs <- fmt.Errorf("served by the paused engine")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if retried.Load() == 0 {
		t.Errorf("no request was retried from the paused %s: the test did not exercise the first-byte timeout", paused.id)
	}
	if took := time.Since(start); took > 2*time.Second+20*time.Second {
		t.Errorf("the requests took %v, want within the first-byte timeout (2 s) plus a prefill", took)
	}
	t.Logf("%d of %d requests retried from the paused engine; all done in %v", retried.Load(), requests, time.Since(start))
}

// SIGTERM to a proxy under load: /health answers 503 at once, and every
// request, in flight or sent during the drain (3 s), is answered 200;
// then the proxy exits on its own.
func checkDrain(t *testing.T, f *fleet) {
	p := f.startProxy("proxy-drain", nil, append(f.proxyArgs(), "--drain-time", "3s")...)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _, err := streamOnce(context.Background(), p.url, chatBody(fmt.Sprintf("Drain worker %d.", w), "Hi "+strconv.Itoa(i), 4, true))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // load under way
	before := ok.Load()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signaled := time.Now()
	var status int
	for time.Since(signaled) < time.Second {
		resp, err := http.Get(p.url + "/health")
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
			if status == http.StatusServiceUnavailable {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status != http.StatusServiceUnavailable {
		t.Errorf("/health answered %d within 1 s of SIGTERM, want 503 at once", status)
	}
	time.Sleep(2 * time.Second) // inside the 3 s drain
	close(stop)
	wg.Wait()
	during := ok.Load() - before
	if failed.Load() > 0 {
		t.Errorf("%d requests failed during the drain (first: %v), want none", failed.Load(), firstErr.Load())
	}
	if during == 0 {
		t.Errorf("no request was answered during the drain")
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Errorf("the proxy still runs 20 s after SIGTERM with a 3 s drain")
	}
	t.Logf("%d requests answered during the drain, %d failed", during, failed.Load())
}

// rssKB reads a /proc/<pid>/status field (VmRSS, VmHWM) in KiB.
func rssKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// oneCharacterChat is a chat body of about size bytes whose message is
// one character repeated: one pre-token of the whole length.
func oneCharacterChat(size int) []byte {
	b, _ := json.Marshal(map[string]any{"model": fleetModel, "max_tokens": 1,
		"messages": []map[string]any{{"role": "user", "content": strings.Repeat("a", size-100)}}})
	return b
}

// Three concurrent 31.5 MB chat bodies of one repeated character keep
// the proxy's peak RSS (VmHWM) within 400 MB, and its RSS is back near
// its start within 60 s. (The engines refuse the prompts; the proxy's
// cost is before forwarding.)
func checkOneCharacterBodies(t *testing.T, f *fleet) {
	p := f.startProxy("proxy-memory", nil, f.proxyArgs()...)
	pid := p.Pid()
	base := rssKB(t, pid, "VmRSS")
	body := oneCharacterChat(31<<20 + 512<<10)
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(p.url+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Errorf("body %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	peak := rssKB(t, pid, "VmHWM")
	if peak > 400<<10 {
		t.Errorf("peak RSS %d MB with three 31.5 MB one-character bodies, want at most 400 MB", peak>>10)
	}
	var now int64
	poll.Eventually(t, 60*time.Second, 500*time.Millisecond, func() (bool, string) {
		now = rssKB(t, pid, "VmRSS")
		return now < base+64<<10, fmt.Sprintf("RSS %d MB after the bodies, started at %d MB: the memory was not returned", now>>10, base>>10)
	})
	t.Logf("statuses %v; RSS at start %d MB, peak %d MB, after %d MB", codes, base>>10, peak>>10, now>>10)
}

// An engine SIGKILLed mid-stream: the client receives vLLM's error event
// (data: {"error": {...}}) and data: [DONE], and then Go's HTTP client
// reports the transfer as broken (unexpected EOF), as does Python's
// http.client (IncompleteRead), instead of a stream that looks complete.
func checkKilledMidStream(t *testing.T, f *fleet) {
	body := chatBody(longSystem("killed"), "Talk for a while.", 200, true) // 4 s at 50 tokens/s
	resp, rd, s := openStream(t, f, context.Background(), body)
	defer resp.Body.Close()
	nextContent(t, rd)
	s.Kill()
	var sawError, sawDone bool
	var readErr error
	for {
		ev, err := rd.Next()
		if err != nil {
			readErr = err
			break
		}
		if string(ev) == openai.Done {
			sawDone = true
			continue
		}
		var e openai.ErrorResponse
		if json.Unmarshal(ev, &e) == nil && e.Error.Code == http.StatusBadGateway && e.Error.Type == "BadGatewayError" {
			sawError = true
		}
	}
	if !sawError || !sawDone {
		t.Errorf("error event %v, [DONE] %v: want both after the engine died", sawError, sawDone)
	}
	if !errors.Is(readErr, io.ErrUnexpectedEOF) {
		t.Errorf("Go's HTTP client read ended with %v, want unexpected EOF (a broken transfer)", readErr)
	}
	if n := metricSum(t, f.proxy.url+"/metrics", "inference_cache_proxy_broken_responses_total", `cause="broken"`); n < 1 {
		t.Errorf("broken_responses_total{cause=broken} %v, want at least 1", n)
	}

	// Python's standard HTTP client, on the same failure with a second engine.
	if _, err := exec.LookPath("python3"); err != nil {
		t.Log("no python3: Python's report not checked")
		return
	}
	script := `
import http.client, sys, threading
c = http.client.HTTPConnection(sys.argv[1], timeout=30)
c.request("POST", "/v1/chat/completions", body=sys.argv[2], headers={"Content-Type": "application/json"})
r = c.getresponse()
r.fp.readline()
sys.stdout.write("replica %s\n" % r.getheader("X-Inference-Cache-Replica")); sys.stdout.flush()
sys.stdin.readline()
try:
    data = r.read()
    print("complete", "error" in data.decode())
except Exception as e:
    print("raised", type(e).__name__)
`
	cmd := exec.Command("python3", "-c", script, strings.TrimPrefix(f.proxy.url, "http://"), chatBody(longSystem("killed-python"), "Talk.", 200, true))
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var replica string
	for replica == "" && sc.Scan() {
		replica, _ = strings.CutPrefix(sc.Text(), "replica ")
	}
	f.sim(replica).Kill()
	time.Sleep(200 * time.Millisecond) // the proxy sees the engine gone
	_, _ = io.WriteString(stdin, "\n")
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	_ = cmd.Wait()
	if !strings.HasPrefix(last, "raised") {
		t.Errorf("Python's http.client: %q, want it to raise on the broken transfer", last)
	}
}
