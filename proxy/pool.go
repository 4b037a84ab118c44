package proxy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// Defaults of PoolOptions.
const (
	// DefaultHealthInterval is the time between two health checks of a
	// backend: a backend that fails leaves the candidates within it (one
	// that refuses a connection leaves at once, see Pool.MarkDown).
	DefaultHealthInterval = 2 * time.Second
	// DefaultHealthTimeout bounds one health check (GET /health, then
	// GET /v1/models when due).
	DefaultHealthTimeout = time.Second
	// DefaultModelsEvery is how many health checks pass between two reads
	// of a backend's /v1/models (it is also read whenever the backend
	// comes up).
	DefaultModelsEvery = 15
	// maxModelsBytes bounds a backend's /v1/models answer.
	maxModelsBytes = 4 << 20
)

// PoolOptions tune a Pool; the zero value means the defaults.
type PoolOptions struct {
	// HealthInterval is the time between health checks of each backend;
	// 0 = DefaultHealthInterval.
	HealthInterval time.Duration
	// HealthTimeout bounds one check; 0 = DefaultHealthTimeout.
	HealthTimeout time.Duration
	// ModelsEvery is the checks between reads of /v1/models; 0 =
	// DefaultModelsEvery.
	ModelsEvery int
	// Client makes the checks; nil = a client without keep-alive
	// sharing with the proxied traffic.
	Client *http.Client
	// Logger logs backends going down and up; nil = slog.Default().
	Logger *slog.Logger
}

// Pool is the proxy's backends and their health. A backend is a
// candidate while its last health check passed (GET /health answered
// 200) and no request found it refusing connections since. Safe for
// concurrent use.
type Pool struct {
	opts PoolOptions

	mu       sync.RWMutex
	backends []*backend // in configuration order
	byID     map[string]*backend
	closed   bool
}

// backend is one engine and its health loop.
type backend struct {
	cfg    Backend
	base   *url.URL
	up     atomic.Bool
	models atomic.Pointer[[]openai.ModelCard]
	lora   atomic.Pointer[loraInfo] // newest adapter residency (adapters.go)
	kv     atomic.Pointer[float64]  // last KV usage of a decode backend (disagg.go)
	first  chan struct{}            // closed after the first check
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// NewPool returns an empty pool; Set gives it its backends.
func NewPool(opts PoolOptions) *Pool {
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.ModelsEvery <= 0 {
		opts.ModelsEvery = DefaultModelsEvery
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Pool{opts: opts, byID: map[string]*backend{}}
}

// Set replaces the backend list (CheckBackends must accept it). A
// backend whose replica id, URL and model are unchanged keeps its health
// and its checks; the others stop, and new ones start with a check that
// Set waits for (at most the health timeout), so a new backend is a
// candidate as soon as Set returns if it is healthy.
func (p *Pool) Set(bs []Backend) error {
	if err := CheckBackends(bs); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("proxy: pool closed")
	}
	var next []*backend
	var started []*backend
	byID := make(map[string]*backend, len(bs))
	for _, cfg := range bs {
		if old := p.byID[cfg.ReplicaID]; old != nil && old.cfg == cfg {
			next = append(next, old)
			byID[cfg.ReplicaID] = old
			continue
		}
		u, _ := parseBackendURL(cfg.URL) // checked
		b := &backend{cfg: cfg, base: u, first: make(chan struct{}), done: make(chan struct{})}
		b.ctx, b.cancel = context.WithCancel(context.Background())
		next = append(next, b)
		byID[cfg.ReplicaID] = b
		started = append(started, b)
	}
	var stopped []*backend
	for id, old := range p.byID {
		if byID[id] != old {
			stopped = append(stopped, old)
		}
	}
	p.backends, p.byID = next, byID
	p.mu.Unlock()

	for _, b := range stopped {
		b.cancel()
		p.opts.Logger.Info("backend removed", "replica", b.cfg.ReplicaID, "url", b.cfg.URL)
	}
	for _, b := range started {
		go p.run(b.ctx, b)
	}
	wait := time.After(p.opts.HealthTimeout + 100*time.Millisecond)
	for _, b := range started {
		select {
		case <-b.first:
		case <-wait:
			return nil
		}
	}
	return nil
}

// Close stops every health loop and waits for them.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	bs := p.backends
	p.backends, p.byID = nil, map[string]*backend{}
	p.mu.Unlock()
	for _, b := range bs {
		b.cancel()
	}
	for _, b := range bs {
		<-b.done
	}
}

// run checks b every interval until ctx ends.
func (p *Pool) run(ctx context.Context, b *backend) {
	defer close(b.done)
	p.check(ctx, b, 0)
	close(b.first)
	t := time.NewTicker(p.opts.HealthInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.check(ctx, b, n)
		}
	}
}

// check runs one health check of b (the n-th).
func (p *Pool) check(ctx context.Context, b *backend, n int) {
	cctx, cancel := context.WithTimeout(ctx, p.opts.HealthTimeout)
	defer cancel()
	if err := p.get(cctx, b, "/health", nil); err != nil {
		if ctx.Err() == nil && (b.up.Swap(false) || n == 0) {
			p.opts.Logger.Warn("backend failed its health check", "replica", b.cfg.ReplicaID, "url", b.cfg.URL, "err", err)
		}
		return
	}
	wasUp := b.up.Swap(true)
	if !wasUp {
		p.opts.Logger.Info("backend healthy", "replica", b.cfg.ReplicaID, "url", b.cfg.URL)
	}
	if b.hasAdapters() || b.cfg.Role == RoleDecode {
		p.scrapeEngine(cctx, b)
	}
	if wasUp && b.models.Load() != nil && n%p.opts.ModelsEvery != 0 {
		return
	}
	var list openai.ModelList
	if err := p.get(cctx, b, "/v1/models", &list); err != nil {
		if b.models.Load() == nil {
			p.opts.Logger.Warn("backend's /v1/models unreadable", "replica", b.cfg.ReplicaID, "err", err)
		}
		return
	}
	b.models.Store(&list.Data)
}

// get fetches path of b, wanting 200, and decodes JSON into v (when not
// nil).
func (p *Pool) get(ctx context.Context, b *backend, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base.String()+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	if v == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxModelsBytes)).Decode(v)
}

// serves reports whether b serves model: its configured model, or one
// its /v1/models lists.
func (b *backend) serves(model string) bool {
	if b.cfg.Model != "" {
		return b.cfg.Model == model || b.adapterBase(model) == b.cfg.Model
	}
	if ms := b.models.Load(); ms != nil {
		for i := range *ms {
			if (*ms)[i].ID == model {
				return true
			}
		}
	}
	return false
}

// Candidates appends to dst the replica ids of the healthy backends
// serving model whole (every role but prefill), in configuration order.
func (p *Pool) Candidates(model string, dst []string) []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, b := range p.backends {
		if b.up.Load() && b.cfg.Role != RolePrefill && b.serves(model) {
			dst = append(dst, b.cfg.ReplicaID)
		}
	}
	return dst
}

// Serves reports whether any backend, healthy or not, serves model.
func (p *Pool) Serves(model string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, b := range p.backends {
		if b.serves(model) {
			return true
		}
	}
	return false
}

// backend returns the backend of replica id (nil when removed).
func (p *Pool) backend(id string) *backend {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.byID[id]
}

// MarkDown takes replica id out of the candidates at once (it refused a
// connection); its next passing health check brings it back.
func (p *Pool) MarkDown(id string, cause error) {
	if b := p.backend(id); b != nil && b.up.Swap(false) {
		p.opts.Logger.Warn("backend marked down", "replica", id, "url", b.cfg.URL, "err", cause)
	}
}

// BackendStatus is one backend as /health reports it.
type BackendStatus struct {
	ReplicaID string   `json:"replica_id"`
	URL       string   `json:"url"`
	Healthy   bool     `json:"healthy"`
	Models    []string `json:"models"`
}

// Status reports every backend, in configuration order.
func (p *Pool) Status() []BackendStatus {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]BackendStatus, len(p.backends))
	for i, b := range p.backends {
		s := BackendStatus{ReplicaID: b.cfg.ReplicaID, URL: b.cfg.URL, Healthy: b.up.Load(), Models: []string{}}
		if b.cfg.Model != "" {
			s.Models = append(s.Models, b.cfg.Model)
		} else if ms := b.models.Load(); ms != nil {
			for _, m := range *ms {
				s.Models = append(s.Models, m.ID)
			}
		}
		out[i] = s
	}
	return out
}

// Models is the union of the backends' models (/v1/models): each
// backend's cards as it lists them (a configured model it does not list
// gets a plain card), the first card of an id kept, sorted by id.
func (p *Pool) Models() []openai.ModelCard {
	p.mu.RLock()
	defer p.mu.RUnlock()
	seen := map[string]bool{}
	var out []openai.ModelCard
	for _, b := range p.backends {
		var cards []openai.ModelCard
		if ms := b.models.Load(); ms != nil {
			cards = *ms
		}
		for _, c := range cards {
			if !seen[c.ID] && (b.cfg.Model == "" || b.cfg.Model == c.ID || adapterParent(&c) == b.cfg.Model) {
				seen[c.ID] = true
				out = append(out, c)
			}
		}
		if m := b.cfg.Model; m != "" && !seen[m] {
			seen[m] = true
			out = append(out, openai.ModelCard{ID: m, Object: openai.ObjectModel, OwnedBy: "inference-cache", Root: m,
				Permission: []openai.ModelPermission{}})
		}
	}
	slices.SortFunc(out, func(a, b openai.ModelCard) int { return cmp.Compare(a.ID, b.ID) })
	if out == nil {
		out = []openai.ModelCard{}
	}
	return out
}
