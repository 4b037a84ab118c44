package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// The proxy's strategy in dev's fleet, and its health checks' bound.
const (
	proxyStrategy = "picker"
	// healthTimeout bounds the proxies' health checks: the engines
	// share a laptop (or a loaded CI machine) with everything else, and a
	// CPU stall of a second is not a dead engine; the proxy's 1 s default
	// took every engine out at once under a load average of 30 on two
	// cores, and requests got 503.
	healthTimeout = 5 * time.Second
)

// fleet is dev's serving fleet beside its nodes: sim engines, the
// subscriber and the proxy, supervised like the nodes.
type fleet struct {
	cfg     localfleet.Config
	engines []*node
	sub     *node
	proxy   *node
	rr      *node // the round-robin proxy, loadgen --compare's baseline
	rrAddr  string
}

// newFleet lays the fleet out after the nodes (localfleet.Addrs) and adds
// its processes to procs.
func newFleet(procs *proccluster.Cluster, byProc map[*proccluster.Proc]*node, dir, host string, base int, ns []*node,
	engines int, modelsDir string, prefillTPS, decodeTPS float64, kvBlocks int) (*fleet, error) {
	es, proxy, subMetrics := localfleet.Addrs(host, base, len(ns), engines)
	grpcs := make([]string, len(ns))
	for i, n := range ns {
		grpcs[i] = n.GRPC
	}
	f := &fleet{cfg: localfleet.Config{Dir: dir, ModelsDir: modelsDir, Cluster: grpcs, Engines: es, Proxy: proxy, SubMetrics: subMetrics,
		PrefillTPS: prefillTPS, DecodeTPS: decodeTPS, KVBlocks: kvBlocks, Scrape: time.Second, HealthTimeout: healthTimeout}}
	add := func(spec proccluster.Spec) *node {
		n := &node{Node: proccluster.Node{ID: spec.Name}, proc: procs.Add(spec), fleet: true}
		byProc[n.proc] = n
		return n
	}
	for _, e := range es {
		f.engines = append(f.engines, add(f.cfg.EngineSpec(e)))
	}
	spec, err := f.cfg.SubscriberSpec()
	if err != nil {
		return nil, err
	}
	f.sub = add(spec)
	f.proxy = add(f.cfg.ProxySpec("proxy", proxyStrategy))
	f.rrAddr = localfleet.RRProxyAddr(host, base, len(ns), engines)
	f.rr = add(f.cfg.RRProxySpec("proxy-rr", f.rrAddr))
	return f, nil
}

// checkPorts refuses a start when a port of the fleet is taken (as
// checkPorts does for the nodes).
func (f *fleet) checkPorts() error {
	check := func(name, what, addr string) error {
		if err := probeBind("tcp", addr); err != nil {
			return fmt.Errorf("%s's %s port %s is in use: %v; is another dev cluster running? Stop it, or pass --base-port for another range", name, what, addr, err)
		}
		return nil
	}
	for _, e := range f.cfg.Engines {
		if err := check(e.ID, "HTTP", e.HTTP); err != nil {
			return err
		}
		if err := check(e.ID, "KV-event", e.Events); err != nil {
			return err
		}
		if err := check(e.ID, "KV-event replay", e.Replay); err != nil {
			return err
		}
	}
	if err := check("the proxy", "HTTP", f.cfg.Proxy); err != nil {
		return err
	}
	if err := check("the round-robin proxy", "HTTP", f.rrAddr); err != nil {
		return err
	}
	return check("the subscriber", "metrics", f.cfg.SubMetrics)
}

// start starts the engines, then the subscriber, then the proxy, each
// once the one before serves.
func (f *fleet) start(ctx context.Context) error {
	for _, n := range f.engines {
		if err := startNode(n); err != nil {
			return err
		}
	}
	for i, n := range f.engines {
		if err := localfleet.WaitUp(ctx, n.proc, f.cfg.Engines[i].URL()+"/health", 60*time.Second); err != nil {
			return err
		}
	}
	if err := startNode(f.sub); err != nil {
		return err
	}
	if err := localfleet.WaitUp(ctx, f.sub.proc, "http://"+f.cfg.SubMetrics+"/metrics", 30*time.Second); err != nil {
		return err
	}
	for _, p := range []*node{f.proxy, f.rr} {
		if err := startNode(p); err != nil {
			return err
		}
	}
	if err := localfleet.WaitUp(ctx, f.proxy.proc, f.proxyURL()+"/health", 60*time.Second); err != nil {
		return err
	}
	return localfleet.WaitUp(ctx, f.rr.proc, "http://"+f.rrAddr+"/health", 60*time.Second)
}

func (f *fleet) proxyURL() string { return "http://" + f.cfg.Proxy }

// banner prints each process of the fleet, and the curl pair to paste.
func (f *fleet) banner(out io.Writer, modelsNote string) {
	fmt.Fprintf(out, "fleet: %d sim engines serving model %q (%s; prefill %g tok/s, decode %g tok/s, %d KV blocks of 16)\n",
		len(f.engines), localfleet.Model, modelsNote, f.cfg.PrefillTPS, f.cfg.DecodeTPS, f.cfg.KVBlocks)
	for i, n := range f.engines {
		e := f.cfg.Engines[i]
		fmt.Fprintf(out, "  %s  pid %d  %s  KV events tcp://%s (replay tcp://%s)  metrics %s/metrics  log %s\n", n.ID, n.proc.Pid(), e.URL(), e.Events, e.Replay, e.URL(), n.proc.LogPath())
	}
	fmt.Fprintf(out, "  subscriber  pid %d  dials the engines' KV events, feeds the cluster  metrics http://%s/metrics  log %s\n",
		f.sub.proc.Pid(), f.cfg.SubMetrics, f.sub.proc.LogPath())
	fmt.Fprintf(out, "  proxy  pid %d  %s (OpenAI API, strategy %s)  metrics %s/metrics  log %s\n",
		f.proxy.proc.Pid(), f.proxyURL(), proxyStrategy, f.proxyURL(), f.proxy.proc.LogPath())
	fmt.Fprintf(out, "  proxy-rr  pid %d  http://%s (OpenAI API, strategy round-robin: the baseline of loadgen --compare)  log %s\n",
		f.rr.proc.Pid(), f.rrAddr, f.rr.proc.LogPath())
}

// writeCurlPair writes the two chat requests of the curl pair into dir
// (chat-1.json, chat-2.json: the same long system prompt, opened with the
// time of this run so that its first request is new to every engine, and
// two questions) and prints the commands that send them.
func (f *fleet) writeCurlPair(out io.Writer, dir string, now time.Time) error {
	sys := systemPrompt(now)
	var paths [2]string
	for i, q := range []string{"Which rule covers refunds?", "Which rule covers passwords?"} {
		body, err := json.MarshalIndent(map[string]any{"model": localfleet.Model, "max_tokens": 16, "messages": []map[string]string{
			{"role": "system", "content": sys}, {"role": "user", "content": q}}}, "", "  ")
		if err != nil {
			return err
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("chat-%d.json", i+1))
		if err := os.WriteFile(paths[i], append(body, '\n'), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "Two chat requests sharing a long system prompt, through the proxy; the second goes to the engine that served the first\n(x-inference-cache-replica says which, x-inference-cache-reason why):\n")
	for _, p := range paths {
		fmt.Fprintf(out, "  curl -s -o /dev/null -D - %s/v1/chat/completions -H 'Content-Type: application/json' -d @%s | grep -i '^x-inference-cache'\n",
			f.proxyURL(), shellQuote(p))
	}
	return nil
}

// systemPrompt is the curl pair's system prompt: about 2,200 tokens of
// numbered rules, led by the run's start time.
func systemPrompt(now time.Time) string {
	topics := []string{"refunds", "passwords", "invoices", "shipping", "outages", "billing disputes", "account deletion", "data exports"}
	tones := []string{"two short sentences", "a numbered list", "plain words without jargon", "a friendly tone"}
	extras := []string{"link the matching help page", "offer to open a ticket", "never promise a date", "ask for the order number first"}
	var b strings.Builder
	fmt.Fprintf(&b, "You are the help desk of the inference-cache dev cluster started at %s. Follow these rules.\n", now.Format(time.RFC3339Nano))
	for i := 1; i <= 64; i++ {
		fmt.Fprintf(&b, "Rule %d: when a customer asks about %s, answer in %s, %s, and sign as desk %d.\n",
			i, topics[i%len(topics)], tones[(i/8)%len(tones)], extras[(i/3)%len(extras)], 100+i)
	}
	return b.String()
}

// shellQuote quotes p for a pasted shell command when it needs it.
func shellQuote(p string) string {
	if strings.IndexFunc(p, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+", r))
	}) < 0 {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}
