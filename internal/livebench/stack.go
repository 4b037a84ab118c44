package livebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// liveFleet sizes the fleet of one live run.
type liveFleet struct {
	engines               int
	prefillTPS, decodeTPS float64
	kvBlocks              int
	scrape                time.Duration
	modes                 *Modes        // nil = aggregated
	proxyDrain            time.Duration // the proxy's --drain-time (0: none)
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
	fleet   localfleet.Config
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
	lf.proxies = max(lf.proxies, 1)
	// The further proxies sit 10 ports apart after the fleet's layout.
	base, err := freeport.Range(localfleet.Ports(liveNodes, lf.engines) + 10*(lf.proxies-1))
	if err != nil {
		return nil, err
	}
	s := &liveStack{procs: proccluster.New(proccluster.Options{Binary: exe})}
	s.layout(dir, modelsDir, base, lf)
	for _, start := range []func() error{
		func() error { return s.startCluster(ctx, dir) },
		func() error { return s.startEngines(ctx) },
		func() error { return s.startSubscriber(ctx) },
		func() error { return s.startProxies(ctx, strategy, lf.proxyDrain) },
	} {
		if err := start(); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

// layout places the nodes at base (node i on base+10i+1..4), the fleet
// after them (localfleet.Addrs) and the further proxies 10 ports apart
// after the fleet.
func (s *liveStack) layout(dir, modelsDir string, base int, lf liveFleet) {
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	var grpcs []string
	for i := 0; i < liveNodes; i++ {
		p, id := base+10*i, "node"+strconv.Itoa(i+1)
		s.nodes = append(s.nodes, proccluster.Node{ID: id, DataDir: filepath.Join(dir, id),
			GRPC: addr(p + 1), Raft: addr(p + 2), Gossip: addr(p + 3), HTTP: addr(p + 4)})
		grpcs = append(grpcs, addr(p+1))
	}
	engines, proxyAddr, subMetrics := localfleet.Addrs("127.0.0.1", base, liveNodes, lf.engines)
	s.fleet = localfleet.Config{Dir: dir, ModelsDir: modelsDir, Cluster: grpcs, Engines: engines, Proxy: proxyAddr, SubMetrics: subMetrics,
		PrefillTPS: lf.prefillTPS, DecodeTPS: lf.decodeTPS, KVBlocks: lf.kvBlocks, Scrape: lf.scrape}
	if lf.modes != nil {
		lf.modes.apply(&s.fleet)
	}
	s.addrs = []string{proxyAddr}
	for k := 1; k < lf.proxies; k++ {
		s.addrs = append(s.addrs, addr(base+10*(liveNodes+lf.engines+k)+1))
	}
}

// startCluster starts the nodes and waits up to 60 s for a leader.
func (s *liveStack) startCluster(ctx context.Context, dir string) error {
	for _, n := range s.nodes {
		p := s.procs.Add(proccluster.Spec{Name: n.ID, Args: proccluster.ServerArgs(n, liveNodes, s.nodes, "--fast-timing"),
			LogPath: filepath.Join(dir, n.ID+".log")})
		s.nodeP = append(s.nodeP, p)
		if err := p.Start(); err != nil {
			return err
		}
	}
	var err error
	if s.members, s.closeM, err = proccluster.DialMembers(s.nodes); err != nil {
		return err
	}
	if _, err := proccluster.WaitLeader(ctx, s.members, 60*time.Second); err != nil {
		return fmt.Errorf("live cluster: %w (logs in %s)", err, dir)
	}
	return nil
}

// startEngines starts the sim engines and waits for each to serve.
func (s *liveStack) startEngines(ctx context.Context) error {
	for _, e := range s.fleet.Engines {
		p := s.procs.Add(s.fleet.EngineSpec(e))
		s.engineP = append(s.engineP, p)
		if err := p.Start(); err != nil {
			return err
		}
	}
	for i, e := range s.fleet.Engines {
		if err := localfleet.WaitUp(ctx, s.engineP[i], e.URL()+"/health", 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// startSubscriber starts the subscriber and waits for its /metrics.
func (s *liveStack) startSubscriber(ctx context.Context) error {
	spec, err := s.fleet.SubscriberSpec()
	if err != nil {
		return err
	}
	s.sub = s.procs.Add(spec)
	if err := s.sub.Start(); err != nil {
		return err
	}
	return localfleet.WaitUp(ctx, s.sub, "http://"+s.fleet.SubMetrics+"/metrics", 30*time.Second)
}

// startProxies starts a proxy with strategy on each of s.addrs, draining
// for drain on SIGTERM, and waits for each to serve.
func (s *liveStack) startProxies(ctx context.Context, strategy string, drain time.Duration) error {
	for k, a := range s.addrs {
		name := "proxy-" + strategy
		if k > 0 {
			name += "-" + strconv.Itoa(k+1)
		}
		pspec := s.fleet.ProxySpecAt(name, strategy, a)
		pspec.Args = append(pspec.Args, "--drain-time", drain.String())
		p := s.procs.Add(pspec)
		s.proxies = append(s.proxies, p)
		if err := p.Start(); err != nil {
			return err
		}
	}
	for k, p := range s.proxies {
		if err := localfleet.WaitUp(ctx, p, "http://"+s.addrs[k]+"/health", 60*time.Second); err != nil {
			return err
		}
	}
	return nil
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
	s.procs.StopAll(localfleet.StopTimeout)
}
