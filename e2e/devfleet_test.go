package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// devPorts is how many ports above --base-port a default dev run uses:
// 3 nodes and 3 engines at 10 ports each, then the proxy and the
// subscriber's metrics.
const devPorts = 63

// `make run`'s fleet: the sim engines, subscriber and proxy come up beside
// the nodes; the curl pair dev prints works as pasted (the second request
// goes, by PREFIX_MATCH, to the engine that served the first); the proxy's
// line reaches the live view; and a SIGKILLed engine is reported and
// restarted like a node.
func TestDev_FleetCurlPairAndSupervision(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster and its fleet")
	}
	base, err := freeport.Range(devPorts)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "d")
	dev := startDev(t, "--dir", dir, "--base-port", strconv.Itoa(base), "--demo-fleet=false")
	out := &dev.out
	waitOutput(t, out, regexp.MustCompile(`Ctrl-C stops the cluster`), 120*time.Second)
	banner := out.String()
	for _, p := range []string{`sim-1  pid \d+  http://`, `sim-3  pid \d+`, `subscriber  pid \d+`, `proxy  pid \d+  http://127\.0\.0\.1:` + strconv.Itoa(base+61)} {
		if !regexp.MustCompile(p).MatchString(banner) {
			t.Fatalf("no %q in the banner:\n%s", p, banner)
		}
	}
	curls := regexp.MustCompile(`(?m)^  curl -s -o /dev/null -D - (http://\S+)/v1/chat/completions -H 'Content-Type: application/json' -d @(\S+) \| grep -i '\^x-inference-cache'$`).
		FindAllStringSubmatch(banner, -1)
	if len(curls) != 2 {
		t.Fatalf("want two curl commands in the banner:\n%s", banner)
	}
	// What each pasted command sends: its file, as curl -d @FILE does.
	send := func(i int) (replica, reason string, body []byte) {
		t.Helper()
		body, err := os.ReadFile(curls[i][2])
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(curls[i][1]+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("curl %d: %s: %s", i+1, resp.Status, raw)
		}
		return resp.Header.Get("X-Inference-Cache-Replica"), resp.Header.Get("X-Inference-Cache-Reason"), body
	}
	first, why, body := send(0)
	if first == "" || why == "PREFIX_MATCH" {
		t.Fatalf("first request: replica %q, reason %s; want an engine picked without a prefix (the system prompt is new to this run)", first, why)
	}
	// A person pastes the second a few seconds later; the test waits
	// until every node's index holds the first's prefill instead.
	waitIndexedOnEvery(t, filepath.Join(dir, "models"), body, first, []string{
		"127.0.0.1:" + strconv.Itoa(base+1), "127.0.0.1:" + strconv.Itoa(base+11), "127.0.0.1:" + strconv.Itoa(base+21)})
	second, why, _ := send(1)
	if second != first || why != "PREFIX_MATCH" {
		t.Fatalf("second request: replica %q, reason %s; want PREFIX_MATCH to %q, which served the first", second, why, first)
	}
	waitOutput(t, out, regexp.MustCompile(`proxy http://\S+: [0-9.]+ requests/s, picks \S+`), 30*time.Second)

	pid, _ := strconv.Atoi(regexp.MustCompile(`sim-2  pid (\d+)`).FindStringSubmatch(banner)[1])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, regexp.MustCompile(`sim-2 killed by signal SIGKILL after \S+; log \S+sim-2\.log`), 10*time.Second)
	waitOutput(t, out, regexp.MustCompile(`sim-2 restarted \(pid \d+\)`), 15*time.Second)

	dev.stop(t, 40*time.Second)
}

// waitIndexedOnEvery waits until each node at addrs answers the key the
// proxy computes for the chat request body with PREFIX_MATCH led by
// replica.
func waitIndexedOnEvery(t *testing.T, modelsDir string, body []byte, replica string, addrs []string) {
	t.Helper()
	req, err := openai.DecodeChat(body)
	if err != nil {
		t.Fatal(err)
	}
	p, err := prompt.New(modelsDir, prompt.Options{}).Tokens(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	lr := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: fleetModel}
	if err := client.Fingerprint(lr, p.TokenIDs, 16); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		c, err := client.New(client.Config{Addrs: []string{a}})
		if err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r := c.LookupRoute(ctx, lr)
			return r.GetReasonCode() == pb.ReasonCode_PREFIX_MATCH && r.GetReplicas()[0].GetReplicaId() == replica,
				fmt.Sprintf("node %s: %v %q %v, want PREFIX_MATCH led by %s", a, r.GetReasonCode(), r.GetDetail(), r.GetReplicas(), replica)
		})
		c.Close()
	}
}
