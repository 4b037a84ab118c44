package e2e

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

var (
	hostileBench    = flag.Bool("hostile-bench", false, "run TestHostileBench: a normal request's latency through the proxy while hostile clients send huge or stalled bodies")
	hostileBenchFor = flag.Duration("hostile-bench-duration", 10*time.Second, "TestHostileBench: how long each phase runs")
)

// TestHostileBench measures what hostile clients cost the other clients
// of a proxy, over real processes (the cluster, the subscriber, one sim
// engine answering at once, the proxy), and logs the figures of
// BENCHMARKS.md. For a proxy with the default open-file limit and one
// started under prlimit --nofile=1024, three phases in turn, while normal
// chat requests go through at 20/s:
//
//  1. baseline: nothing else;
//  2. huge bodies: three clients sending 31.5 MB chat bodies of one
//     repeated character, back to back; the proxy's peak RSS (VmHWM);
//  3. stalled bodies: 2,000 connections that send a body's headers and
//     stop, each one dialed again as the proxy closes it.
//
// The normal requests' p50 and p99 per phase, and p99's excess over the
// baseline's, are logged. It runs only with -hostile-bench (go test ./e2e
// -run TestHostileBench -hostile-bench -v).
func TestHostileBench(t *testing.T) {
	if !*hostileBench {
		t.Skip("a benchmark: run with -hostile-bench")
	}
	if testing.Short() {
		t.Skip("starts a cluster, a sim engine, the subscriber and proxies")
	}
	f := startFleet(t, fleetOptions{sims: 1, simFlags: []string{"--prefill-tps", "1e9", "--decode-tps", "1e6", "--kv-blocks", "65536"}})
	flags := append(f.proxyArgs(), "--body-idle-timeout", "2s", "--body-timeout", "4s")
	limited := startLimitedProxy(t, f, flags)
	for _, p := range []struct {
		name string
		url  string
		pid  int
	}{{"default open-file limit", f.proxy.url, f.proxy.Pid()}, {"prlimit --nofile=1024", limited.url, limited.Pid()}} {
		base := normalLoad(t, p.url, *hostileBenchFor, nil)
		huge := normalLoad(t, p.url, *hostileBenchFor, func(stop <-chan struct{}) { hugeBodies(p.url, stop) })
		peak := rssKB(t, p.pid, "VmHWM")
		stalled := normalLoad(t, p.url, *hostileBenchFor, func(stop <-chan struct{}) { stalledBodies(p.url, 2000, stop) })
		for _, ph := range []struct {
			name string
			ls   []time.Duration
		}{{"baseline", base}, {"three 31.5 MB one-character bodies", huge}, {"2,000 stalled bodies", stalled}} {
			t.Logf("%s, %s: %d normal requests, p50 %v, p99 %v (p99 %+v over the baseline)", p.name, ph.name, len(ph.ls),
				quantile(ph.ls, 0.5).Round(100*time.Microsecond), quantile(ph.ls, 0.99).Round(100*time.Microsecond),
				(quantile(ph.ls, 0.99) - quantile(base, 0.99)).Round(100*time.Microsecond))
		}
		t.Logf("%s: peak RSS %d MB", p.name, peak>>10)
	}
}

// startLimitedProxy starts a second proxy over f under prlimit
// --nofile=1024 (prlimit sets the limit and execs the proxy: same pid).
func startLimitedProxy(t *testing.T, f *fleet, flags []string) *httpProc {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit")
	}
	pc := proccluster.New(proccluster.Options{Binary: prlimit})
	t.Cleanup(func() { pc.StopAll(10 * time.Second) })
	p := &httpProc{url: "http://" + freeport.MustAddr(t)}
	args := append([]string{"--nofile=1024:1024", binPath, "proxy", "--listen", strings.TrimPrefix(p.url, "http://"), "--drain-time", "0s"}, flags...)
	p.Proc = pc.Add(proccluster.Spec{Name: "proxy-nofile-1024", Args: args, LogPath: filepath.Join(f.dir, "proxy-nofile-1024.log")})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, p.url+"/health", 30*time.Second)
	return p
}

// normalLoad sends small chat requests to url at 20/s for d while
// hostile runs (when not nil), and returns their latencies; a failed
// request fails the test.
func normalLoad(t *testing.T, url string, d time.Duration, hostile func(stop <-chan struct{})) []time.Duration {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if hostile != nil {
		wg.Add(1)
		go func() { defer wg.Done(); hostile(stop) }()
		time.Sleep(time.Second) // the hostile clients under way
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	body := chatBody("You are terse.", "Say hi.", 1, false)
	var mu sync.Mutex
	var ls []time.Duration
	var failed int
	tick := time.NewTicker(50 * time.Millisecond)
	var reqs sync.WaitGroup
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			start := time.Now()
			resp, err := hc.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || resp.StatusCode != http.StatusOK {
				failed++
				return
			}
			ls = append(ls, time.Since(start))
		}()
	}
	tick.Stop()
	reqs.Wait()
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d normal requests failed", failed)
	}
	slices.Sort(ls)
	return ls
}

// hugeBodies keeps three 31.5 MB one-character chat bodies in flight to
// url until stop.
func hugeBodies(url string, stop <-chan struct{}) {
	body := string(oneCharacterChat(31<<20 + 512<<10))
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
}

// stalledBodies keeps n connections to url that sent a body's headers
// and stopped, dialing again each one the proxy closes, until stop.
func stalledBodies(url string, n int, stop <-chan struct{}) {
	addr := strings.TrimPrefix(url, "http://")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
				go func() { <-ctx.Done(); c.Close() }()
				_, _ = io.Copy(io.Discard, c) // until the proxy closes it
				c.Close()
			}
		}()
	}
	wg.Wait()
}
