package simengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inference-cache/inference-cache/internal/kvcache"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
)

// Defaults of Config.
const (
	// DefaultBlockSize is vLLM's default KV block size on GPUs (tokens).
	DefaultBlockSize = 16
	// DefaultPrefillTPS and DefaultDecodeTPS are the bench's engine speeds
	// (bench.DefaultPrefillTPS, bench.DefaultDecodeTPS).
	DefaultPrefillTPS = 10000
	DefaultDecodeTPS  = 40
	// MaxBlockSize bounds BlockSize (the subscriber's bound).
	MaxBlockSize = 4096
)

// EventPublisher sends one encoded KV-event batch (vllmpub.Publisher).
type EventPublisher interface {
	Publish(payload []byte) (uint64, error)
}

// Config configures an Engine.
type Config struct {
	// Model is the one model name the engine serves (required): requests
	// for another get vLLM's 404.
	Model string
	// BlockSize is the tokens per KV block (default DefaultBlockSize,
	// 1..MaxBlockSize); only full blocks are cached, as in vLLM.
	BlockSize int
	// KVBlocks is the KV capacity in blocks (required, ≥ 1), shared by the
	// cached prefixes and the running requests. A request needs
	// ceil((prompt + max_tokens) / BlockSize) blocks; more than KVBlocks
	// is refused (its max_model_len is KVBlocks × BlockSize).
	KVBlocks int
	// PrefillTPS is the prefill speed in uncached prompt tokens per second
	// (default DefaultPrefillTPS).
	PrefillTPS float64
	// DecodeTPS is each running request's decode speed in output tokens
	// per second, however many decode at once (default DefaultDecodeTPS).
	DecodeTPS float64
	// Events receives the KV-event batches; nil publishes nothing.
	Events EventPublisher
	// EventEncoding is the batches' msgpack form ("" = positional, as
	// vLLM's msgspec encodes them).
	EventEncoding vllmpub.Encoding
	// HashSeed seeds the engine's block hashes (vLLM's NONE_HASH); 0 = at
	// random, as vLLM without PYTHONHASHSEED.
	HashSeed uint64
	// Registerer receives the metrics; nil = a registry of the engine's
	// own (Engine.Gatherer serves it).
	Registerer prometheus.Registerer
	// Clock is the time source; nil = the wall clock.
	Clock Clock
	// Logger is the structured logger; nil = slog.Default().
	Logger *slog.Logger
	// LoRA are the adapters served (lora.go); zero = none.
	LoRA LoRAConfig
	// Disagg is the engine's part in disaggregated prefill/decode
	// (disagg.go); zero = none.
	Disagg DisaggConfig
}

func (c *Config) fill() error {
	if c.Model == "" {
		return errors.New("simengine: model name required")
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.BlockSize < 1 || c.BlockSize > MaxBlockSize {
		return fmt.Errorf("simengine: block size %d: want 1 to %d", c.BlockSize, MaxBlockSize)
	}
	if c.KVBlocks < 1 {
		return fmt.Errorf("simengine: %d KV blocks: need at least 1", c.KVBlocks)
	}
	if c.PrefillTPS == 0 {
		c.PrefillTPS = DefaultPrefillTPS
	}
	if c.DecodeTPS == 0 {
		c.DecodeTPS = DefaultDecodeTPS
	}
	if !(c.PrefillTPS > 0) || !(c.DecodeTPS > 0) {
		return fmt.Errorf("simengine: prefill %v and decode %v tokens/s must be positive", c.PrefillTPS, c.DecodeTPS)
	}
	if err := c.LoRA.fill(c.Model); err != nil {
		return err
	}
	if err := c.Disagg.fill(); err != nil {
		return err
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ErrTooLong is returned (wrapped) by Submit for a request that needs more
// KV blocks than the engine has.
var ErrTooLong = errors.New("simengine: request longer than the KV cache")

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("simengine: engine closed")

// Engine is one simulated vLLM replica in real time (see the package
// documentation for its model). Safe for concurrent use.
type Engine struct {
	cfg    Config
	hasher blockHasher
	m      *metrics
	gather prometheus.Gatherer
	pub    *eventQueue
	lora   *loraState // nil = no adapters

	mu         sync.Mutex
	cache      *kvcache.Cache
	adm        kvcache.Admission
	queue      []*request // waiting, FIFO
	prefilling *request
	decoding   map[*request]struct{}
	running    int // prefilling or decoding
	reserved   int // blocks the running requests' tails and outputs hold
	closed     bool
}

// New starts an engine.
func New(cfg Config) (*Engine, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, hasher: newBlockHasher(cfg.HashSeed), cache: kvcache.New(cfg.KVBlocks), decoding: map[*request]struct{}{}}
	reg := cfg.Registerer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, e.gather = r, r
	}
	e.m = newMetrics(reg, cfg.Model, cfg.BlockSize, cfg.KVBlocks)
	e.lora = newLoRAState(cfg.LoRA, reg, cfg.Model)
	if cfg.Events != nil {
		var err error
		if e.pub, err = newEventQueue(cfg.Events, cfg.EventEncoding, cfg.BlockSize, e.m, cfg.Logger); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Gatherer is the engine's own metrics registry (nil when
// Config.Registerer was given).
func (e *Engine) Gatherer() prometheus.Gatherer { return e.gather }

// Model is the served model name.
func (e *Engine) Model() string { return e.cfg.Model }

// MaxModelLen is the most tokens (prompt + output) one request may hold:
// KVBlocks × BlockSize.
func (e *Engine) MaxModelLen() int { return e.cfg.KVBlocks * e.cfg.BlockSize }

// Close cancels every request and stops the event publisher after it
// sent what was queued. Requests submitted afterwards fail with ErrClosed.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	for _, r := range slices.Clone(e.queue) {
		e.cancelLocked(r, false)
	}
	if e.prefilling != nil {
		e.cancelLocked(e.prefilling, false)
	}
	for r := range e.decoding {
		e.cancelLocked(r, false)
	}
	e.mu.Unlock()
	if e.pub != nil {
		e.pub.close()
	}
}

// Submit queues a request of prompt token ids for maxTokens output
// tokens (≥ 1), salted with salt ("" = none), on the base model. ctx is
// the client's: when it ends the request stops wherever it is and frees
// its blocks. Errors wrap ErrTooLong or ErrClosed.
func (e *Engine) Submit(ctx context.Context, prompt []uint32, maxTokens int, salt string) (*Handle, error) {
	return e.SubmitJob(ctx, Job{Prompt: prompt, MaxTokens: maxTokens, Salt: salt})
}

// Job is one request to SubmitJob.
type Job struct {
	// Prompt are the token ids prefilled (at least one); MaxTokens the
	// output tokens (≥ 1); Salt the cache_salt ("" = none).
	Prompt    []uint32
	MaxTokens int
	Salt      string
	// Adapter is the LoRA adapter's name ("" = the base model); one the
	// engine does not serve is refused with ErrUnknownAdapter.
	Adapter string
	// RemotePrefill is set for a decode of disaggregated serving (the
	// request's kv_transfer_params.do_remote_prefill): the prompt's
	// uncached blocks are pulled from the prefill replica at
	// DisaggConfig.TransferPerBlock each instead of computed.
	RemotePrefill bool
}

// ErrUnknownAdapter is returned (wrapped) by SubmitJob for an adapter the
// engine does not serve.
var ErrUnknownAdapter = errors.New("simengine: no such LoRA adapter")

// SubmitJob queues j; see Submit. Errors wrap ErrTooLong, ErrClosed or
// ErrUnknownAdapter.
func (e *Engine) SubmitJob(ctx context.Context, j Job) (*Handle, error) {
	prompt, maxTokens, salt := j.Prompt, j.MaxTokens, j.Salt
	adapterID, ok := e.adapterID(j.Adapter)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownAdapter, j.Adapter)
	}
	if len(prompt) == 0 {
		return nil, errors.New("simengine: empty prompt")
	}
	if maxTokens < 1 {
		return nil, fmt.Errorf("simengine: max tokens %d: want at least 1", maxTokens)
	}
	if n := len(prompt) + maxTokens; n > e.MaxModelLen() {
		return nil, fmt.Errorf("%w: %d prompt + %d output tokens = %d, over the %d tokens of %d blocks of %d", ErrTooLong,
			len(prompt), maxTokens, n, e.MaxModelLen(), e.cfg.KVBlocks, e.cfg.BlockSize)
	}
	bs := e.cfg.BlockSize
	full := len(prompt) / bs
	r := &request{
		prompt: prompt, maxTokens: maxTokens, salt: salt, adapter: j.Adapter, adapterID: adapterID, remote: j.RemotePrefill,
		hashes:  e.hasher.appendHashes(make([]uint64, 0, full), prompt, bs, salt, j.Adapter),
		reserve: (len(prompt) - full*bs + maxTokens + bs - 1) / bs,
		notify:  make(chan struct{}, 1),
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	r.arrived = e.cfg.Clock.Now()
	e.queue = append(e.queue, r)
	r.stopWatch = context.AfterFunc(ctx, func() { e.cancel(r) }) // runs after Unlock
	e.scheduleLocked()
	e.gaugesLocked()
	e.mu.Unlock()
	return &Handle{e: e, r: r}, nil
}

// cancel stops r wherever it is (a client that went away): a waiting
// request leaves the queue; a prefilling one stops, and the blocks it
// stored but had not computed are dropped (they were never announced);
// a decoding one stops. Its pinned blocks and reservation are released.
func (e *Engine) cancel(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancelLocked(r, true)
}

func (e *Engine) cancelLocked(r *request, count bool) {
	stage := ""
	switch r.state {
	case stateWaiting:
		stage = StageWaiting
		e.queue = slices.DeleteFunc(e.queue, func(q *request) bool { return q == r })
	case statePrefill:
		stage = StagePrefill
		r.timer.Stop()
		e.prefilling = nil
		e.release(r)
		for _, run := range r.stored {
			e.cache.Drop(r.hashes[run.Start:run.End])
		}
	case stateDecode:
		stage = StageDecode
		r.timer.Stop()
		delete(e.decoding, r)
		e.release(r)
	default:
		return
	}
	r.state, r.cancelled = stateDone, true
	if count {
		e.m.cancelled.WithLabelValues(stage).Inc()
	}
	e.cfg.Logger.Debug("request cancelled", "stage", stage, "prompt_tokens", len(r.prompt), "tokens", r.generated)
	r.wake()
	e.scheduleLocked()
	e.gaugesLocked()
}

// release gives back what a running request held.
func (e *Engine) release(r *request) {
	e.cache.Unpin(r.hashes)
	e.reserved -= r.reserve
	e.running--
	e.lora.stop(r)
}

// scheduleLocked starts the next prefill when none runs: the head of the
// queue, once its blocks fit beside what the running requests hold (a
// head that does not fit waits, and so does everyone behind it: first
// come, first served, as vLLM's scheduler).
func (e *Engine) scheduleLocked() {
	if e.prefilling != nil || len(e.queue) == 0 || e.closed {
		return
	}
	i := 0
	if e.lora != nil {
		// vLLM's scheduler passes over a request whose adapter would
		// exceed --max-loras in the batch, for the next that fits.
		if i = slices.IndexFunc(e.queue, e.lora.admissible); i < 0 {
			return
		}
	}
	r := e.queue[i]
	if !e.cache.Fits(r.hashes, e.reserved+r.reserve) {
		return
	}
	e.queue = slices.Delete(e.queue, i, i+1)
	now := e.cfg.Clock.Now()
	bs := e.cfg.BlockSize
	// vLLM always computes the prompt's last token, so a fully cached
	// prompt still recomputes its last block.
	cachedBlocks := min(e.cache.CachedRun(r.hashes), (len(r.prompt)-1)/bs)
	e.cache.AdmitPinned(r.hashes, &e.adm, e.reserved+r.reserve)
	e.reserved += r.reserve
	e.running++
	r.stored = slices.Clone(e.adm.Stored)
	if len(e.adm.Evicted) > 0 && e.pub != nil {
		e.pub.removed(now, e.adm.Evicted)
	}
	r.cached = cachedBlocks * bs
	r.prefill = e.prefillTime(r) + e.lora.start(r)
	r.state, r.prefillAt = statePrefill, now
	e.prefilling = r
	e.m.queries.Add(float64(len(r.prompt)))
	e.m.hits.Add(float64(r.cached))
	e.m.queueTime.Observe(now.Sub(r.arrived).Seconds())
	r.timer = e.cfg.Clock.AfterFunc(r.prefill, func() { e.prefillDone(r) })
}

// prefillDone ends r's prefill: its new blocks are announced, its first
// token is out (the prefill step samples it), and the next prefill starts.
func (e *Engine) prefillDone(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.state != statePrefill {
		return // cancelled meanwhile
	}
	now := e.cfg.Clock.Now()
	if e.pub != nil && len(r.stored) > 0 {
		e.pub.stored(now, r.hashes, r.stored, r.prompt, r.salt, r.adapterID, r.adapter)
	}
	e.prefilling = nil
	e.decoding[r] = struct{}{}
	r.state, r.firstAt, r.lastAt = stateDecode, now, now
	r.generated = 1
	e.m.promptTokens.Add(float64(len(r.prompt)))
	e.m.generatedTokens.Inc()
	e.m.prefillTime.Observe(now.Sub(r.prefillAt).Seconds())
	e.m.ttft.Observe(now.Sub(r.arrived).Seconds())
	if r.generated == r.maxTokens {
		e.finishLocked(r, now)
	} else {
		r.timer = e.cfg.Clock.AfterFunc(e.tokenInterval(), func() { e.decodeStep(r) })
	}
	r.wake()
	e.scheduleLocked()
	e.gaugesLocked()
}

func (e *Engine) tokenInterval() time.Duration {
	return time.Duration(float64(time.Second) / e.cfg.DecodeTPS)
}

// decodeStep produces r's next token.
func (e *Engine) decodeStep(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.state != stateDecode {
		return
	}
	now := e.cfg.Clock.Now()
	r.generated++
	e.m.generatedTokens.Inc()
	e.m.tpot.Observe(now.Sub(r.lastAt).Seconds())
	r.lastAt = now
	if r.generated == r.maxTokens {
		e.finishLocked(r, now)
		e.scheduleLocked()
		e.gaugesLocked()
	} else {
		r.timer = e.cfg.Clock.AfterFunc(e.tokenInterval(), func() { e.decodeStep(r) })
	}
	r.wake()
}

// finishLocked ends r after its last token (max_tokens reached).
func (e *Engine) finishLocked(r *request, now time.Time) {
	r.state = stateDone
	delete(e.decoding, r)
	e.release(r)
	e.m.success.WithLabelValues("length").Inc()
	e.m.decodeTime.Observe(now.Sub(r.firstAt).Seconds())
	e.m.e2e.Observe(now.Sub(r.arrived).Seconds())
	r.stopWatch()
}

// gaugesLocked updates the scheduler gauges: waiting and running
// requests, and the KV usage as vLLM reports it (blocks held by running
// requests over the capacity; cached blocks nobody uses count as free).
func (e *Engine) gaugesLocked() {
	e.m.waiting.Set(float64(len(e.queue)))
	e.m.running.Set(float64(e.running))
	e.m.kvUsage.Set(min(1, float64(e.cache.PinnedBlocks()+e.reserved)/float64(e.cfg.KVBlocks)))
	e.lora.gauge(e.queue, e.cfg.Clock.Now())
}
