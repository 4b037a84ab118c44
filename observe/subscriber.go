package observe

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Options are the Subscriber's dependencies; every field is optional.
type Options struct {
	// Metrics receives the counters; nil: NewMetrics(nil) (unregistered).
	Metrics *Metrics
	// Logger is the structured logger; nil: slog.Default().
	Logger *slog.Logger
	// HTTPClient scrapes metrics_url; nil: a client with a 5 s timeout.
	HTTPClient *http.Client
	// QueueCapacity and MaxBatchEvents size the Forwarder (0: defaults).
	QueueCapacity, MaxBatchEvents int
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Subscriber runs one stream per engine socket (and one stats scraper per
// engine with a metrics_url) and forwards everything to a Sink. Reload
// applies a new configuration while running.
type Subscriber struct {
	sink Sink
	opts Options
	m    *Metrics
	log  *slog.Logger
	fw   *Forwarder

	reload   chan *Config
	mu       sync.Mutex
	cfg      *Config
	scrapers map[string]*scraper // by replica id, while running

	// lis is the listen-mode listener while cfg.Listen is set; only the
	// Run goroutine touches it.
	lis *listener
}

// engineRun is a running engine: its streams and their stop handle.
type engineRun struct {
	cfg     EngineConfig
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	streams []*stream
}

// New returns a Subscriber for cfg (validated) writing to sink.
func New(cfg *Config, sink Sink, opts Options) *Subscriber {
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Subscriber{sink: sink, opts: opts, m: opts.Metrics, log: opts.Logger, cfg: cfg, reload: make(chan *Config, 1)}
	s.fw = NewForwarder(sink, opts.Metrics, opts.Logger, opts.QueueCapacity, opts.MaxBatchEvents)
	s.fw.now = opts.Now
	return s
}

// Reload replaces the configuration of a running Subscriber (SIGHUP):
// engines whose entry (by replica_id) is gone or changed are stopped and
// their replicas cleared; new or changed entries are started. cfg must be
// validated. The latest of several quick reloads wins.
func (s *Subscriber) Reload(cfg *Config) {
	for {
		select {
		case s.reload <- cfg:
			return
		default:
			select {
			case <-s.reload:
			default:
			}
		}
	}
}

// Run subscribes until ctx ends, then stops every engine (without clearing
// their replicas: a restarted subscriber resumes from the positions the
// cluster holds, or clears them when it cannot, resume.go).
func (s *Subscriber) Run(ctx context.Context) error {
	fwCtx, fwCancel := context.WithCancel(ctx)
	var fwDone sync.WaitGroup
	fwDone.Add(1)
	go func() { defer fwDone.Done(); s.fw.Run(fwCtx) }()
	defer func() { fwCancel(); fwDone.Wait() }()

	running := map[string]*engineRun{}
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	s.apply(ctx, running, cfg)
	for {
		select {
		case <-ctx.Done():
			for _, e := range running {
				e.cancel()
				e.wg.Wait()
			}
			if s.lis != nil {
				s.lis.close()
				s.lis = nil
			}
			return nil
		case c := <-s.reload:
			s.mu.Lock()
			s.cfg = c
			s.mu.Unlock()
			s.apply(ctx, running, c)
		}
	}
}

// apply brings running in line with cfg.
func (s *Subscriber) apply(ctx context.Context, running map[string]*engineRun, cfg *Config) {
	s.applyListen(ctx, running, cfg)
	want := map[string]*EngineConfig{}
	for i := range cfg.Engines {
		want[cfg.Engines[i].ReplicaID] = &cfg.Engines[i]
	}
	stopped := map[string]bool{}
	for id, e := range running {
		if w, ok := want[id]; ok && w.equal(&e.cfg) {
			continue
		}
		s.stop(ctx, e, "config_removed")
		delete(running, id)
		stopped[id] = true
	}
	for i := range cfg.Engines {
		ec := cfg.Engines[i]
		if _, ok := running[ec.ReplicaID]; ok {
			continue
		}
		// A changed entry was just cleared: its position is void.
		running[ec.ReplicaID] = s.start(ctx, ec, time.Duration(cfg.ReplayTimeout), time.Duration(cfg.ScrapeInterval), !stopped[ec.ReplicaID])
	}
}

// start starts ec's streams; with resume they resume from the positions
// the cluster holds (resume.go) when the sink keeps them.
func (s *Subscriber) start(ctx context.Context, ec EngineConfig, replayTimeout, scrape time.Duration, resume bool) *engineRun {
	ectx, cancel := context.WithCancel(ctx)
	e := &engineRun{cfg: ec, cancel: cancel}
	em := s.m.forEngine(ec.ReplicaID)
	for r := 0; r < ec.DataParallelSize; r++ {
		st := newStream(&e.cfg, int64(r), replayTimeout, em, s.log, s.fw, s.opts.Now)
		if ps, ok := s.sink.(PositionStore); ok {
			st.store = ps
			st.fetch = resume
		}
		e.streams = append(e.streams, st)
		e.wg.Add(1)
		go func() { defer e.wg.Done(); st.run(ectx) }()
		if ec.servedByListen() && s.lis != nil {
			s.lis.add(&e.cfg, r, &route{ch: st.live, done: ectx.Done(), m: em, log: st.log, drops: &st.frameDrops})
		}
	}
	// Logged once its streams (and listen routes) are in place.
	if ec.servedByListen() {
		s.log.Info("engine added (served by listen)", "engine", ec.ReplicaID, "topic", ec.Topic, "pod", ec.Pod, "ranks", ec.DataParallelSize)
	} else {
		s.log.Info("engine added", "engine", ec.ReplicaID, "endpoint", ec.Endpoint, "ranks", ec.DataParallelSize)
	}
	if ec.MetricsURL != "" {
		sc := &scraper{cfg: &e.cfg, client: s.opts.HTTPClient, sink: s.sink, interval: scrape, m: em,
			log: s.log.With("engine", ec.ReplicaID), now: s.opts.Now, kick: make(chan chan struct{})}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); sc.run(ectx) }()
		s.mu.Lock()
		if s.scrapers == nil {
			s.scrapers = map[string]*scraper{}
		}
		s.scrapers[ec.ReplicaID] = sc
		s.mu.Unlock()
	}
	return e
}

// ScrapeNow has the stats scrapers of the engines named by replica id
// (none named: every engine) scrape their metrics_url once more, outside
// their interval, and report the stats; it returns when each has had its
// report answered (successfully or not), or with ctx's error. Unknown ids
// are skipped. For tests and the benchmark gateway, whose engines change
// their metrics in virtual time.
func (s *Subscriber) ScrapeNow(ctx context.Context, replicaIDs ...string) error {
	s.mu.Lock()
	scs := make([]*scraper, 0, len(s.scrapers))
	if len(replicaIDs) == 0 {
		for _, sc := range s.scrapers {
			scs = append(scs, sc)
		}
	}
	for _, id := range replicaIDs {
		if sc := s.scrapers[id]; sc != nil {
			scs = append(scs, sc)
		}
	}
	s.mu.Unlock()
	dones := make([]chan struct{}, 0, len(scs))
	for _, sc := range scs {
		done := make(chan struct{})
		select {
		case sc.kick <- done:
			dones = append(dones, done)
		case <-sc.stopped():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stop ends an engine's streams and clears every replica they produced
// ("a replica removed from the config has its entries cleared").
func (s *Subscriber) stop(ctx context.Context, e *engineRun, reason string) {
	if e.cfg.servedByListen() && s.lis != nil {
		for r := range e.streams {
			s.lis.remove(&e.cfg, r)
		}
	}
	e.cancel()
	e.wg.Wait()
	s.mu.Lock()
	delete(s.scrapers, e.cfg.ReplicaID)
	s.mu.Unlock()
	var evs []*pb.BlockEvent
	now := s.opts.Now().UnixMilli()
	for _, st := range e.streams {
		evs = st.tr.clearAll(evs, reason, now)
	}
	s.log.Info("engine removed; its replicas are cleared", "engine", e.cfg.ReplicaID, "replicas", len(evs))
	_ = s.fw.Enqueue(ctx, evs)
}

// applyListen brings the listener in line with cfg before the engines are:
// a changed listen or topic_pattern stops every engine served by the old
// listener (their topics may now name other engines; apply starts them
// again on the new one), no listen closes it, and a larger
// data_parallel_size binds the extra rank sockets.
func (s *Subscriber) applyListen(ctx context.Context, running map[string]*engineRun, cfg *Config) {
	if s.lis != nil && !s.lis.serves(cfg) {
		for id, e := range running {
			if e.cfg.servedByListen() {
				s.stop(ctx, e, "config_removed")
				delete(running, id)
			}
		}
		s.lis.close()
		s.lis = nil
	}
	if cfg.Listen == "" {
		return
	}
	if s.lis == nil {
		s.lis = startListener(ctx, cfg, listenRanks(cfg), s.m, s.log)
		return
	}
	s.lis.ensureRanks(listenRanks(cfg))
}
