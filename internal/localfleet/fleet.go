package localfleet

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// Engine is one sim engine of a local fleet: its replica id, the
// HOST:PORT of its OpenAI API, of its KV-event PUB socket and of its
// replay ROUTER socket (vLLM's replay endpoint, which lets a restarted
// subscriber keep the engine's hints, contract §6.11).
type Engine struct {
	ID, HTTP, Events, Replay string
}

// URL is the engine's base URL.
func (e Engine) URL() string { return "http://" + e.HTTP }

// Config is a local serving fleet beside a cluster: sim engines
// publishing KV events, the subscriber that feeds them to the cluster,
// and the routing proxy in front of the engines. dev and bench --live
// start it from the same specs.
type Config struct {
	// Dir holds the logs and the subscriber's configuration file.
	Dir string
	// ModelsDir holds Model (ModelsDir).
	ModelsDir string
	// Cluster are the nodes' gRPC addresses.
	Cluster []string
	// Engines, and the addresses of the proxy's API and the subscriber's
	// /metrics (HOST:PORT).
	Engines           []Engine
	Proxy, SubMetrics string
	// PrefillTPS, DecodeTPS and KVBlocks are every engine's.
	PrefillTPS, DecodeTPS float64
	KVBlocks              int
	// Scrape is how often the subscriber reads each engine's /metrics.
	Scrape time.Duration
	// HealthTimeout, when set, bounds the proxies' health checks of the
	// engines (their --health-timeout; else the proxy's default).
	HealthTimeout time.Duration
	// EngineArgs are added to every engine's command line, ProxyArgs to
	// the proxy's; Roles give backends a role (replica id → prefill,
	// decode; none = both). bench --live's modes set them.
	EngineArgs, ProxyArgs []string
	Roles                 map[string]string
}

// EngineSpec is engine e's sim-engine process.
func (c *Config) EngineSpec(e Engine) proccluster.Spec {
	return proccluster.Spec{Name: e.ID, LogPath: filepath.Join(c.Dir, e.ID+".log"), Args: append([]string{"sim-engine",
		"--listen", e.HTTP, "--replica-id", e.ID, "--model", Model, "--models-dir", c.ModelsDir,
		"--prefill-tps", ftoa(c.PrefillTPS), "--decode-tps", ftoa(c.DecodeTPS), "--kv-blocks", strconv.Itoa(c.KVBlocks),
		"--kv-events-bind", "tcp://" + e.Events, "--kv-events-replay-bind", "tcp://" + e.Replay}, c.EngineArgs...)}
}

// subscriberYAML is the subscriber's configuration (contract §12.6): each
// engine's PUB socket dialled, its replay endpoint named, its /metrics
// scraped for load.
func (c *Config) subscriberYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scrape_interval: %s\nengines:\n", c.Scrape)
	for _, e := range c.Engines {
		fmt.Fprintf(&b, "  - endpoint: tcp://%s\n    replay_endpoint: tcp://%s\n    replica_id: %s\n    model_id: %s\n    hash_scheme: vllm\n    block_size: 16\n    metrics_url: %s/metrics\n",
			e.Events, e.Replay, e.ID, Model, e.URL())
	}
	return b.String()
}

// SubscriberSpec writes the subscriber's configuration file and returns
// its process.
func (c *Config) SubscriberSpec() (proccluster.Spec, error) {
	path := filepath.Join(c.Dir, "subscriber.yaml")
	if err := os.WriteFile(path, []byte(c.subscriberYAML()), 0o644); err != nil {
		return proccluster.Spec{}, err
	}
	args := []string{"subscribe", "--config", path, "--metrics-addr", c.SubMetrics}
	for _, a := range c.Cluster {
		args = append(args, "--addr", a)
	}
	return proccluster.Spec{Name: "subscriber", LogPath: filepath.Join(c.Dir, "subscriber.log"), Args: args}, nil
}

// ProxySpec is the proxy's process with strategy (one of the proxy's
// --strategy values), logging to name.log.
func (c *Config) ProxySpec(name, strategy string) proccluster.Spec {
	return c.ProxySpecAt(name, strategy, c.Proxy)
}

// ProxySpecAt is ProxySpec listening on addr (HOST:PORT): one more
// gateway in front of the same engines and cluster.
func (c *Config) ProxySpecAt(name, strategy, addr string) proccluster.Spec {
	// No drain: a local fleet has no load balancer to drain from, and stops at once.
	args := []string{"proxy", "--listen", addr, "--models-dir", c.ModelsDir, "--strategy", strategy, "--drain-time", "0s"}
	for _, a := range c.Cluster {
		args = append(args, "--addr", a)
	}
	return c.withBackends(name, args)
}

// RRProxySpec is a round-robin proxy on listen in front of the same
// engines, asking the cluster nothing (dev's baseline for loadgen
// --compare).
func (c *Config) RRProxySpec(name, listen string) proccluster.Spec {
	return c.withBackends(name, []string{"proxy", "--listen", listen, "--strategy", "round-robin", "--drain-time", "0s"})
}

// withBackends is a proxy process of args with every engine as a
// backend, logging to name.log.
func (c *Config) withBackends(name string, args []string) proccluster.Spec {
	if c.HealthTimeout > 0 {
		args = append(args, "--health-timeout", c.HealthTimeout.String())
	}
	for _, e := range c.Engines {
		b := e.ID + "=" + e.URL()
		if r := c.Roles[e.ID]; r != "" {
			b += "," + r
		}
		args = append(args, "--backend", b)
	}
	args = append(args, c.ProxyArgs...)
	return proccluster.Spec{Name: name, LogPath: filepath.Join(c.Dir, name+".log"), Args: args}
}

// waitHTTP polls url until it answers 200, p exits, or limit passes.
func waitHTTP(ctx context.Context, p *proccluster.Proc, url string, limit time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	return poll.Until(ctx, limit, 100*time.Millisecond, func() (bool, string) {
		select {
		case <-p.Done():
			return true, ""
		default:
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, fmt.Sprintf("%s: %v (log %s)", url, err, p.LogPath())
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s answered %s (log %s)", url, resp.Status, p.LogPath())
	})
}

// WaitUp polls url (every 100 ms, each GET within 1 s) until it answers
// 200, p exits or limit passes; it errors naming p and its log when url
// never answered, or when p exited meanwhile, saying how and the log's
// last line.
func WaitUp(ctx context.Context, p *proccluster.Proc, url string, limit time.Duration) error {
	if err := waitHTTP(ctx, p, url, limit); err != nil {
		return fmt.Errorf("%s not up: %w", p.Name(), err)
	}
	select {
	case <-p.Done():
		return fmt.Errorf("%s %s while starting; its log %s ends: %s", p.Name(), p.Wait(), p.LogPath(), p.LastLogLine())
	default:
	}
	return nil
}

// ftoa formats a flag's float without exponent noise.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Addrs places a fleet after the nodes of a dev-style layout (node i
// on base+10i+1…4): engine j (from 0) at base+10(nodes+j)+1 (HTTP), +2
// (KV events) and +3 (KV-event replay), then the proxy at base+10(nodes+engines)+1 and the
// subscriber's /metrics at +2. The engines are sim-1, sim-2, ….
func Addrs(host string, base, nodes, engines int) (es []Engine, proxy, subMetrics string) {
	addr := func(p int) string { return host + ":" + strconv.Itoa(p) }
	for j := 0; j < engines; j++ {
		p := base + 10*(nodes+j)
		es = append(es, Engine{ID: "sim-" + strconv.Itoa(j+1), HTTP: addr(p + 1), Events: addr(p + 2), Replay: addr(p + 3)})
	}
	p := base + 10*(nodes+engines)
	return es, addr(p + 1), addr(p + 2)
}

// Ports is how many ports above base a layout of nodes and engines
// spans (for freeport.Range): up to dev's round-robin proxy (RRProxyAddr).
func Ports(nodes, engines int) int { return 10*(nodes+engines) + 3 }

// RRProxyAddr is where dev's round-robin proxy listens: the port after
// the subscriber's /metrics (base+10(nodes+engines)+3).
func RRProxyAddr(host string, base, nodes, engines int) string {
	return host + ":" + strconv.Itoa(base+10*(nodes+engines)+3)
}

// StopTimeout bounds a clean stop of a local cluster and its fleet: every
// process gets SIGTERM at once (a leader transfers leadership first) and
// is killed when still running after this long.
const StopTimeout = 15 * time.Second
