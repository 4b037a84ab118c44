package simengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inference-cache/inference-cache/engine"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
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
	// BlockSize is the tokens per KV block (0 = fingerprint.DefaultBlockSize,
	// 1..fingerprint.MaxBlockSize); only full blocks are cached, as in vLLM.
	BlockSize int
	// KVBlocks is the KV capacity in blocks (required, ≥ 1), shared by the
	// cached prefixes and the running requests. A request needs
	// ceil((prompt + max_tokens) / BlockSize) blocks; more than KVBlocks
	// is refused (its max_model_len is KVBlocks × BlockSize).
	KVBlocks int
	// PrefillTPS is the prefill speed in uncached prompt tokens per second
	// (0 = engine.DefaultPrefillTPS).
	PrefillTPS float64
	// DecodeTPS is each running request's decode speed in output tokens
	// per second, however many decode at once (0 = engine.DefaultDecodeTPS).
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

// fill sets the defaults and checks the settings; the engine model's
// part is engine.Config's.
func (c *Config) fill() error {
	if c.Model == "" {
		return errors.New("simengine: model name required")
	}
	mc := c.model(nil)
	if err := mc.Fill(); err != nil {
		return fmt.Errorf("simengine: %w", err)
	}
	c.BlockSize, c.PrefillTPS, c.DecodeTPS = mc.BlockSize, mc.PrefillTPS, mc.DecodeTPS
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

// model is the engine model's configuration: every decode step reported
// (the streams need them), gate (nil = none) passing requests over.
func (c *Config) model(gate engine.Gate) engine.Config {
	return engine.Config{BlockSize: c.BlockSize, KVBlocks: c.KVBlocks, PrefillTPS: c.PrefillTPS, DecodeTPS: c.DecodeTPS,
		EachToken: true, Gate: gate}
}

// ErrTooLong is returned (wrapped) by Submit for a request that needs more
// KV blocks than the engine has (the engine model's error).
var ErrTooLong = engine.ErrTooLong

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("simengine: engine closed")

// Engine is one simulated vLLM replica in real time: the engine model
// (package engine) stepped by the clock, one timer at its next step.
// Safe for concurrent use.
type Engine struct {
	cfg    Config
	hasher blockHasher
	m      *metrics
	gather prometheus.Gatherer
	pub    *eventQueue
	lora   *loraState // nil = no adapters
	origin time.Time  // the model's time 0

	mu       sync.Mutex
	model    *engine.Model
	reqs     map[engine.ID]*request // submitted, not ended
	lastID   engine.ID
	timer    Timer // fires at the model's next step; nil = none due
	timerAt  float64
	timerGen uint64
	closed   bool
}

// New starts an engine.
func New(cfg Config) (*Engine, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, hasher: newBlockHasher(cfg.HashSeed), reqs: map[engine.ID]*request{}, origin: cfg.Clock.Now()}
	reg := cfg.Registerer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, e.gather = r, r
	}
	e.m = newMetrics(reg, cfg.Model, cfg.BlockSize, cfg.KVBlocks)
	e.lora = newLoRAState(cfg.LoRA, reg, cfg.Model)
	var gate engine.Gate
	if e.lora != nil {
		gate = loraGate{e}
	}
	model, err := engine.New(cfg.model(gate), e.onEvent)
	if err != nil {
		return nil, err
	}
	e.model = model
	if cfg.Events != nil {
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
	ids := make([]engine.ID, 0, len(e.reqs))
	for id := range e.reqs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e.cancelLocked(e.reqs[id], false)
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
	prompt, maxTokens := j.Prompt, j.MaxTokens
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
	bs := e.cfg.BlockSize
	r := &request{
		prompt: prompt, maxTokens: maxTokens, salt: j.Salt, adapter: j.Adapter, adapterID: adapterID,
		hashes: e.hasher.appendHashes(make([]uint64, 0, len(prompt)/bs), prompt, bs, j.Salt, j.Adapter),
		notify: make(chan struct{}, 1),
	}
	mr := engine.Request{Blocks: r.hashes, PromptTokens: len(prompt), OutputTokens: maxTokens}
	if j.RemotePrefill {
		mr.PullPerBlock = e.cfg.Disagg.TransferPerBlock.Seconds()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	e.lastID++
	r.id, r.arrived = e.lastID, e.cfg.Clock.Now()
	e.reqs[r.id] = r
	if err := e.model.Submit(r.id, mr, e.sec(r.arrived)); err != nil {
		delete(e.reqs, r.id)
		if errors.Is(err, ErrTooLong) {
			err = fmt.Errorf("%w: %d prompt + %d output tokens = %d, over the %d tokens of %d blocks of %d", ErrTooLong,
				len(prompt), maxTokens, len(prompt)+maxTokens, e.MaxModelLen(), e.cfg.KVBlocks, bs)
		}
		return nil, err
	}
	r.stopWatch = context.AfterFunc(ctx, func() { e.cancel(r) }) // runs once the lock is free
	e.changedLocked()
	return &Handle{e: e, r: r}, nil
}

// cancel stops r wherever it is (a client that went away): the model
// takes it out of the queue, or stops its prefill (dropping the blocks it
// stored but never computed, which were never announced) or its decode.
func (e *Engine) cancel(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancelLocked(r, true)
}

func (e *Engine) cancelLocked(r *request, count bool) {
	if r.state == stateDone {
		return
	}
	stage, ok := e.model.Cancel(r.id, e.sec(e.cfg.Clock.Now()))
	if !ok {
		return
	}
	delete(e.reqs, r.id)
	r.state, r.cancelled = stateDone, true
	if count {
		e.m.cancelled.WithLabelValues(string(stage)).Inc()
	}
	e.cfg.Logger.Debug("request cancelled", "stage", stage, "prompt_tokens", len(r.prompt), "tokens", r.generated)
	r.wake()
	e.changedLocked()
}

// sec is t as the model's time (seconds since the engine started); at
// is the inverse.
func (e *Engine) sec(t time.Time) float64 { return t.Sub(e.origin).Seconds() }

func (e *Engine) at(s float64) time.Time { return e.origin.Add(seconds(s)) }

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// changedLocked re-arms the step timer and updates the gauges after the
// model changed.
func (e *Engine) changedLocked() {
	next, ok := e.model.Next()
	switch {
	case !ok:
		e.stopTimerLocked()
	case e.timer == nil || next != e.timerAt:
		e.stopTimerLocked()
		e.timerGen++
		gen := e.timerGen
		e.timerAt = next
		e.timer = e.cfg.Clock.AfterFunc(max(0, seconds(next-e.sec(e.cfg.Clock.Now()))), func() { e.fire(gen, next) })
	}
	e.gaugesLocked()
}

func (e *Engine) stopTimerLocked() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// fire steps the model to the step the timer was set for (the clock
// reached it, up to its nanosecond rounding).
func (e *Engine) fire(gen uint64, target float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if gen != e.timerGen || e.timer == nil {
		return // replaced or stopped meanwhile
	}
	e.timer = nil
	e.model.Advance(max(target, e.sec(e.cfg.Clock.Now())))
	e.changedLocked()
}

// gaugesLocked updates the scheduler gauges: waiting and running
// requests, and the KV usage as vLLM reports it (the model's).
func (e *Engine) gaugesLocked() {
	e.m.waiting.Set(float64(e.model.Waiting()))
	e.m.running.Set(float64(e.model.Running()))
	e.m.kvUsage.Set(e.model.KVUsage())
	if e.lora != nil {
		var queue []*request
		e.model.EachWaiting(func(id engine.ID) { queue = append(queue, e.reqs[id]) })
		e.lora.gauge(queue, e.cfg.Clock.Now())
	}
}
