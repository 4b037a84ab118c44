package bench

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/inference-cache/inference-cache/engine"
)

// GeneratorConfig shapes the built-in trace. Zero fields take the
// defaults in parentheses.
type GeneratorConfig struct {
	// Seed makes the trace: the same seed and settings give the same
	// trace, byte for byte.
	Seed uint64
	// Requests is the number of requests (2,000).
	Requests int
	// RatePerSec is the arrival rate of new sessions and single-turn
	// requests together (4 per second).
	RatePerSec float64
	// SystemPrompts is the number of distinct shared system prompts (32),
	// chosen with a Zipf distribution of exponent ZipfS (1.2), each
	// 1–SystemPromptMaxBlocks (4) blocks long.
	SystemPrompts         int
	ZipfS                 float64
	SystemPromptMaxBlocks int
	// SingleTurnShare is the share of arrivals that are single-turn
	// diffuse traffic: a system prompt plus a unique document (0.3).
	SingleTurnShare float64
	// MeanTurns is the mean number of turns of a chat session (5,
	// geometric).
	MeanTurns float64
	// MeanThinkSec is the mean time between a session's answer and its
	// next turn (20 s, exponential).
	MeanThinkSec float64
	// ArrivalResolutionMs, when positive, rounds every timestamp down to
	// a multiple of it, as traces logged at a coarse resolution are:
	// requests then arrive in bursts of one instant, which different
	// gateways decide concurrently (0 = millisecond timestamps).
	ArrivalResolutionMs int64
}

func (c *GeneratorConfig) fill() {
	if c.Requests <= 0 {
		c.Requests = 2000
	}
	if c.RatePerSec <= 0 {
		c.RatePerSec = 4
	}
	if c.SystemPrompts <= 0 {
		c.SystemPrompts = 32
	}
	if c.ZipfS <= 1 {
		c.ZipfS = 1.2
	}
	if c.SystemPromptMaxBlocks <= 0 {
		c.SystemPromptMaxBlocks = 4
	}
	if c.SingleTurnShare <= 0 {
		c.SingleTurnShare = 0.3
	}
	if c.MeanTurns < 1 {
		c.MeanTurns = 5
	}
	if c.MeanThinkSec <= 0 {
		c.MeanThinkSec = 20
	}
}

// session is a chat in progress.
type session struct {
	at        float64 // next request time (s)
	turnsLeft int
	tokens    int      // conversation length so far (system prompt + history)
	full      []uint64 // ids of the conversation's full blocks so far
}

type sessionHeap []*session

func (h sessionHeap) Len() int           { return len(h) }
func (h sessionHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h sessionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sessionHeap) Push(x any)        { *h = append(*h, x.(*session)) }
func (h *sessionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Generate returns a deterministic trace in the Mooncake format: chat
// sessions that start with a shared system prompt (Zipf-popular) and
// grow turn by turn (each prompt = the previous prompt + the answer + a new
// user message), mixed with single-turn requests (a system prompt plus a
// unique document). Hash ids form a prefix tree as in Mooncake: a full
// block's id is fixed once the block is complete; a partial last block
// gets a fresh id every time.
func Generate(cfg GeneratorConfig) *Trace {
	cfg.fill()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x67656e65726174))
	zipf := rand.NewZipf(rng, cfg.ZipfS, 1, uint64(cfg.SystemPrompts-1))
	var nextID uint64
	newID := func() uint64 { nextID++; return nextID - 1 }
	// System prompts: whole blocks, ids allocated up front.
	sys := make([][]uint64, cfg.SystemPrompts)
	for i := range sys {
		n := 1 + rng.IntN(cfg.SystemPromptMaxBlocks)
		for j := 0; j < n; j++ {
			sys[i] = append(sys[i], newID())
		}
	}
	exp := func(mean float64) float64 { return rng.ExpFloat64() * mean }
	uniform := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	// request builds a prompt of s.tokens + add tokens on top of s's full
	// blocks, extending them; returns the record.
	build := func(s *session, add int, at float64) Request {
		s.tokens += add
		for len(s.full) < s.tokens/TraceBlockTokens {
			s.full = append(s.full, newID())
		}
		ids := append([]uint64(nil), s.full...)
		if s.tokens%TraceBlockTokens != 0 {
			ids = append(ids, newID())
		}
		return Request{Timestamp: int64(math.Round(at * 1000)), InputLength: s.tokens, HashIDs: ids}
	}
	t := &Trace{Name: fmt.Sprintf("generator(seed=%d)", cfg.Seed)}
	var live sessionHeap
	nextArrival := exp(1 / cfg.RatePerSec)
	for len(t.Requests) < cfg.Requests {
		if live.Len() > 0 && live[0].at <= nextArrival {
			s := heap.Pop(&live).(*session)
			r := build(s, uniform(50, 600), s.at) // the new user message
			r.OutputLength = uniform(50, 500)
			t.Requests = append(t.Requests, r)
			s.turnsLeft--
			if s.turnsLeft > 0 {
				s.tokens += r.OutputLength // the answer joins the history
				s.at += float64(r.OutputLength)/engine.DefaultDecodeTPS + exp(cfg.MeanThinkSec)
				heap.Push(&live, s)
			}
			continue
		}
		at := nextArrival
		nextArrival += exp(1 / cfg.RatePerSec)
		p := sys[zipf.Uint64()]
		s := &session{at: at, tokens: len(p) * TraceBlockTokens, full: append([]uint64(nil), p...)}
		if rng.Float64() < cfg.SingleTurnShare {
			r := build(s, uniform(500, 8000), at) // a unique document
			r.OutputLength = uniform(20, 300)
			t.Requests = append(t.Requests, r)
			continue
		}
		// Geometric number of turns with the configured mean.
		s.turnsLeft = 1 + int(math.Floor(math.Log(1-rng.Float64())/math.Log(1-1/cfg.MeanTurns)))
		heap.Push(&live, s)
	}
	if res := cfg.ArrivalResolutionMs; res > 0 {
		for i := range t.Requests {
			t.Requests[i].Timestamp -= t.Requests[i].Timestamp % res
		}
	}
	return t
}
