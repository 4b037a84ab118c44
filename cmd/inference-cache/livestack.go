package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// liveFleet sizes the fleet of one live run.
type liveFleet struct {
	engines               int
	prefillTPS, decodeTPS float64
	kvBlocks              int
	scrape                time.Duration
	modes                 *liveModeOptions // nil = aggregated
	proxyDrain            time.Duration    // the proxy's --drain-time (0: none)
	// proxies is how many proxies (gateway replicas) share the cluster
	// and the engines, at least 1.
	proxies int
}

// liveStack is one live run's processes, all of this binary on loopback:
// a 3-node cluster, the sim engines, the subscriber and the proxies.
type liveStack struct {
	procs   *proccluster.Cluster
	nodes   []proccluster.Node
	nodeP   []*proccluster.Proc
	engineP []*proccluster.Proc
	sub     *proccluster.Proc
	proxies []*proccluster.Proc
	addrs   []string // the proxies' HOST:PORT, fleet.Proxy first
	fleet   fleetConfig
	members []proccluster.Member
	closeM  func()
}

// liveNodes is the live run's cluster size.
const liveNodes = 3

// startLiveStack starts a fresh cluster under dir (empty data), then the
// fleet with the proxy's strategy, and waits for each part to serve. On
// error every process started is stopped.
func startLiveStack(ctx context.Context, exe, dir, modelsDir, strategy string, lf liveFleet) (*liveStack, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var base int
	var err error
	lf.proxies = max(lf.proxies, 1)
	// The further proxies sit 10 ports apart after the fleet's layout.
	if base, err = freeport.Range(fleetPorts(liveNodes, lf.engines) + 10*(lf.proxies-1)); err != nil {
		return nil, err
	}
	s := &liveStack{procs: proccluster.New(proccluster.Options{Binary: exe})}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	var grpcs []string
	for i := 0; i < liveNodes; i++ {
		p, id := base+10*i, "node"+strconv.Itoa(i+1)
		s.nodes = append(s.nodes, proccluster.Node{ID: id, DataDir: filepath.Join(dir, id),
			GRPC: addr(p + 1), Raft: addr(p + 2), Gossip: addr(p + 3), HTTP: addr(p + 4)})
		grpcs = append(grpcs, addr(p+1))
	}
	engines, proxyAddr, subMetrics := fleetAddrs("127.0.0.1", base, liveNodes, lf.engines)
	s.fleet = fleetConfig{Dir: dir, ModelsDir: modelsDir, Cluster: grpcs, Engines: engines, Proxy: proxyAddr, SubMetrics: subMetrics,
		PrefillTPS: lf.prefillTPS, DecodeTPS: lf.decodeTPS, KVBlocks: lf.kvBlocks, Scrape: lf.scrape}
	if lf.modes != nil {
		lf.modes.apply(&s.fleet)
	}
	fail := func(err error) (*liveStack, error) {
		s.stop()
		return nil, err
	}
	for _, n := range s.nodes {
		p := s.procs.Add(proccluster.Spec{Name: n.ID, Args: proccluster.ServerArgs(n, liveNodes, s.nodes, "--fast-timing"),
			LogPath: filepath.Join(dir, n.ID+".log")})
		s.nodeP = append(s.nodeP, p)
		if err := p.Start(); err != nil {
			return fail(err)
		}
	}
	ns := make([]*devNode, len(s.nodes))
	for i, n := range s.nodes {
		ns[i] = &devNode{Node: n}
	}
	if s.members, s.closeM, err = devMembers(ns); err != nil {
		return fail(err)
	}
	if _, err := proccluster.WaitLeader(ctx, s.members, 60*time.Second); err != nil {
		return fail(fmt.Errorf("live cluster: %w (logs in %s)", err, dir))
	}
	for _, e := range engines {
		p := s.procs.Add(s.fleet.engineSpec(e))
		s.engineP = append(s.engineP, p)
		if err := p.Start(); err != nil {
			return fail(err)
		}
	}
	for i, e := range engines {
		if err := waitUp(ctx, s.engineP[i], e.URL()+"/health", 60*time.Second); err != nil {
			return fail(err)
		}
	}
	spec, err := s.fleet.subscriberSpec()
	if err != nil {
		return fail(err)
	}
	s.sub = s.procs.Add(spec)
	if err := s.sub.Start(); err != nil {
		return fail(err)
	}
	if err := waitUp(ctx, s.sub, "http://"+subMetrics+"/metrics", 30*time.Second); err != nil {
		return fail(err)
	}
	s.addrs = []string{proxyAddr}
	for k := 1; k < lf.proxies; k++ {
		s.addrs = append(s.addrs, addr(base+10*(liveNodes+lf.engines+k)+1))
	}
	for k, a := range s.addrs {
		name := "proxy-" + strategy
		if k > 0 {
			name += "-" + strconv.Itoa(k+1)
		}
		pspec := s.fleet.proxySpecAt(name, strategy, a)
		pspec.Args = append(pspec.Args, "--drain-time", lf.proxyDrain.String())
		p := s.procs.Add(pspec)
		s.proxies = append(s.proxies, p)
		if err := p.Start(); err != nil {
			return fail(err)
		}
	}
	for k, p := range s.proxies {
		if err := waitUp(ctx, p, "http://"+s.addrs[k]+"/health", 60*time.Second); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// proxyURL is the first proxy's base URL.
func (s *liveStack) proxyURL() string { return "http://" + s.fleet.Proxy }

// proxyURLs are every proxy's base URL, the first one first.
func (s *liveStack) proxyURLs() []string {
	out := make([]string, len(s.addrs))
	for k, a := range s.addrs {
		out[k] = "http://" + a
	}
	return out
}

// stop stops every process and releases the cluster connections.
func (s *liveStack) stop() {
	if s.closeM != nil {
		s.closeM()
	}
	s.procs.StopAll(devStopTimeout)
}

// scrapeMetrics reads a Prometheus text endpoint.
func scrapeMetrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
}

// metricSum is the sum of family name's counters or gauges whose labels
// include every pair of want (label, value, label, value, …); 0 when
// absent.
func metricSum(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// metricByLabel sums family name's counters by the value of label.
func metricByLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
