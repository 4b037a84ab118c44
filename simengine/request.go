package simengine

import (
	"context"
	"time"

	"github.com/inference-cache/inference-cache/engine"
)

type state int

const (
	stateWaiting state = iota
	statePrefill
	stateDecode
	stateDone
)

// request is one request in the engine; every field after the first
// block is guarded by Engine.mu.
type request struct {
	prompt    []uint32
	hashes    []uint64 // the engine's hashes of the prompt's full blocks
	maxTokens int
	salt      string
	adapter   string        // LoRA adapter name, "" = the base model
	adapterID int           // its lora_id (0 for the base model)
	notify    chan struct{} // capacity 1: progress since the reader last looked

	id                                  engine.ID   // its id in the engine model
	stopWatch                           func() bool // stops the client-context watch
	state                               state
	cancelled                           bool
	cached                              int           // prompt tokens found in the cache
	prefill                             time.Duration // modelled prefill time
	generated                           int
	arrived, prefillAt, firstAt, lastAt time.Time
}

// wake tells the reader there is progress (never blocks).
func (r *request) wake() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Progress is a request's state as its reader sees it.
type Progress struct {
	// Tokens is the number of output tokens generated so far.
	Tokens int
	// Done is set once the request finished (Tokens == max tokens) or was
	// cancelled (Cancelled).
	Done, Cancelled bool
	// PromptTokens is the prompt's length; CachedTokens the prefix found
	// in the KV cache when its prefill started (whole blocks; known once
	// Tokens > 0).
	PromptTokens, CachedTokens int
	// Prefill is the modelled prefill time: uncached tokens / PrefillTPS
	// (known once Tokens > 0).
	Prefill time.Duration
}

// Handle is the submitter's view of one request.
type Handle struct {
	e *Engine
	r *request
}

// Progress returns the request's current state.
func (h *Handle) Progress() Progress {
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	r := h.r
	p := Progress{Tokens: r.generated, Done: r.state == stateDone, Cancelled: r.cancelled, PromptTokens: len(r.prompt)}
	if r.generated > 0 {
		p.CachedTokens, p.Prefill = r.cached, r.prefill
	}
	return p
}

// Next waits until the request generated more than seen tokens or is
// done, and returns its progress; ctx ending returns ctx's error.
func (h *Handle) Next(ctx context.Context, seen int) (Progress, error) {
	for {
		p := h.Progress()
		if p.Tokens > seen || p.Done {
			return p, nil
		}
		select {
		case <-h.r.notify:
		case <-ctx.Done():
			return p, ctx.Err()
		}
	}
}

// Cancel stops the request (as its client going away does).
func (h *Handle) Cancel() { h.e.cancel(h.r) }
