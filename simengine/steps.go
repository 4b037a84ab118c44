package simengine

import (
	"time"

	"github.com/inference-cache/inference-cache/engine"
)

// onEvent is the engine model's report of one request's step (called
// with e.mu held, from the model call that caused it): it publishes the
// KV events as vLLM does (BlockRemoved as a prefill's admission evicts,
// BlockStored once the prefill computed the blocks), keeps the metrics,
// and wakes the request's reader.
func (e *Engine) onEvent(ev *engine.Event) {
	r := e.reqs[ev.ID]
	if r == nil {
		return
	}
	now := e.at(ev.At)
	switch ev.Kind {
	case engine.Started:
		if len(ev.Evicted) > 0 && e.pub != nil {
			e.pub.removed(now, ev.Evicted)
		}
		r.state, r.prefillAt = statePrefill, now
		r.cached, r.prefill = ev.CachedTokens, seconds(ev.Prefill)
		e.m.queries.Add(float64(len(r.prompt)))
		e.m.hits.Add(float64(r.cached))
		e.m.queueTime.Observe(now.Sub(r.arrived).Seconds())
	case engine.FirstToken:
		if e.pub != nil && len(ev.Stored) > 0 {
			e.pub.stored(now, r.hashes, ev.Stored, r.prompt, r.salt, r.adapterID, r.adapter)
		}
		r.state, r.firstAt, r.lastAt, r.generated = stateDecode, now, now, 1
		e.m.promptTokens.Add(float64(len(r.prompt)))
		e.m.generatedTokens.Inc()
		e.m.prefillTime.Observe(now.Sub(r.prefillAt).Seconds())
		e.m.ttft.Observe(now.Sub(r.arrived).Seconds())
	case engine.Token:
		e.token(r, now)
	case engine.Done:
		if ev.Tokens > r.generated {
			e.token(r, now)
		}
		e.finishLocked(r, now)
	}
	r.wake()
}

// token counts r's next decoded token, produced at now.
func (e *Engine) token(r *request, now time.Time) {
	r.generated++
	e.m.generatedTokens.Inc()
	e.m.tpot.Observe(now.Sub(r.lastAt).Seconds())
	r.lastAt = now
}

// finishLocked ends r after its last token (max_tokens reached).
func (e *Engine) finishLocked(r *request, now time.Time) {
	r.state = stateDone
	delete(e.reqs, r.id)
	e.m.success.WithLabelValues("length").Inc()
	e.m.decodeTime.Observe(now.Sub(r.firstAt).Seconds())
	e.m.e2e.Observe(now.Sub(r.arrived).Seconds())
	if r.stopWatch != nil {
		r.stopWatch()
	}
}

// loraGate is the engine model's Gate for the LoRA adapters (lora.go):
// the model asks by request id.
type loraGate struct{ e *Engine }

func (g loraGate) Admissible(id engine.ID) bool { return g.e.lora.admissible(g.e.reqs[id]) }

func (g loraGate) Starting(id engine.ID) float64 { return g.e.lora.start(g.e.reqs[id]).Seconds() }

func (g loraGate) Stopped(id engine.ID) { g.e.lora.stop(g.e.reqs[id]) }
