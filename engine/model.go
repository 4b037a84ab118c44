package engine

import (
	"fmt"
	"slices"
)

// ID names a submitted request (the caller's choice).
type ID uint64

// Request is one request to Submit.
type Request struct {
	// Blocks are the hashes of the prompt's full blocks, in order (at
	// most PromptTokens / BlockSize); the cache keys on them.
	Blocks []uint64
	// PromptTokens is the prompt's length (≥ 1).
	PromptTokens int
	// OutputTokens is the tokens generated (≥ 0; 0 ends at the first
	// token, which the prefill step samples anyway).
	OutputTokens int
	// PullPerBlock, when positive, is the seconds to pull one uncached
	// block from a prefill replica instead of computing it (the decode of
	// disaggregated serving).
	PullPerBlock float64
}

// Stage is where a request was when it was cancelled.
type Stage string

// Stages of Cancel.
const (
	StageWaiting Stage = "waiting"
	StagePrefill Stage = "prefill"
	StageDecode  Stage = "decode"
)

type state uint8

const (
	stateWaiting state = iota
	statePrefill
	stateDecode
)

// job is one request in the model.
type job struct {
	id      ID
	r       Request
	blocks  []uint64 // r.Blocks, clipped to the capacity with ClipOversize
	reserve int
	state   state
	gen     uint32 // bumped when the job's scheduled step is void
	arrived float64
	first   float64 // first token (known from the prefill's start)
	tokens  int     // generated so far
	pinned  int     // leading blocks pinned (AdmitPinned)
	stored  []BlockRun
}

// Model is one engine; see the package documentation. Not safe for
// concurrent use.
type Model struct {
	cfg         Config
	emit        func(*Event)
	cache       *Cache
	adm         Admission
	steps       steps
	jobs        map[ID]*job
	queue       []*job // waiting, in arrival order
	prefilling  *job
	prefillFree float64 // end of the latest prefill started
	running     int     // prefilling or decoding
	reserved    int     // blocks the running requests reserve
	now         float64
	ev          Event
	free        []*job // ended jobs, reused
}

// newJob is a job to fill: an ended one reused (its generation kept, so
// that its stale steps stay void) or a new one.
func (m *Model) newJob() *job {
	n := len(m.free)
	if n == 0 {
		return &job{}
	}
	j := m.free[n-1]
	m.free = m.free[:n-1]
	*j = job{gen: j.gen, stored: j.stored[:0]}
	return j
}

// end forgets j (ended or cancelled) and keeps it for reuse.
func (m *Model) end(j *job) {
	delete(m.jobs, j.id)
	j.gen++
	m.free = append(m.free, j)
}

// New returns an idle engine of cfg (filled with Config.Fill) that passes
// every event to emit (synchronously, from the call that caused it; the
// *Event and its slices are valid only during the call).
func New(cfg Config, emit func(*Event)) (*Model, error) {
	if err := cfg.Fill(); err != nil {
		return nil, err
	}
	if emit == nil {
		emit = func(*Event) {}
	}
	return &Model{cfg: cfg, emit: emit, cache: NewCache(cfg.KVBlocks), jobs: map[ID]*job{}}, nil
}

// Config is the model's filled configuration.
func (m *Model) Config() Config { return m.cfg }

// Cache is the engine's KV cache as of the latest prefill's start (read
// it, do not change it).
func (m *Model) Cache() *Cache { return m.cache }

// Now is the latest time the model was stepped to (seconds).
func (m *Model) Now() float64 { return m.now }

// Waiting is the number of requests queued for prefill.
func (m *Model) Waiting() int { return len(m.queue) }

// EachWaiting calls fn with every waiting request, in arrival order.
func (m *Model) EachWaiting(fn func(ID)) {
	for _, j := range m.queue {
		fn(j.id)
	}
}

// Running is the number of requests prefilling or decoding.
func (m *Model) Running() int { return m.running }

// KVUsage is the share of the KV cache the running requests hold, as
// vLLM reports it (their pinned blocks, once each, and their reserved
// blocks over the capacity; cached blocks nobody uses count as free).
func (m *Model) KVUsage() float64 {
	return min(1, float64(m.cache.PinnedBlocks()+m.reserved)/float64(m.cfg.KVBlocks))
}

// PrefillFreeAt is when the latest prefill started ends (seconds): a
// request arriving later waits at least until then.
func (m *Model) PrefillFreeAt() float64 { return m.prefillFree }

// Predict is what request r arriving at t would find: its cached tokens
// on the cache as it is and its first token's time, waiting for the
// prefills started before it. It is exact when no request waits and r
// would not wait for KV room (the bench's oracle reads it).
func (m *Model) Predict(r *Request, t float64) (cachedTokens int, firstAt float64) {
	cachedTokens = CachedTokens(m.cache.CachedRun(r.Blocks), r.PromptTokens, m.cfg.BlockSize)
	return cachedTokens, max(t, m.prefillFree) + m.cfg.PrefillSeconds(r.PromptTokens, cachedTokens, r.PullPerBlock)
}

// Submit steps the model to time at (seconds; not before the previous
// submission's), queues r as request id (the caller's, unique among the
// requests not ended), arrived then, and starts it when it can. Errors: ErrTooLong
// (wrapped) for a request needing more than KVBlocks blocks without
// Config.ClipOversize; an id in use; a request of no prompt tokens, more
// full blocks than its prompt holds, or negative output.
func (m *Model) Submit(id ID, r Request, at float64) error {
	bs := m.cfg.BlockSize
	if r.PromptTokens < 1 || len(r.Blocks) > r.PromptTokens/bs || r.OutputTokens < 0 {
		return fmt.Errorf("engine: %d prompt tokens, %d full blocks of %d, %d output tokens: want at least one prompt token, its full blocks at most, and output ≥ 0",
			r.PromptTokens, len(r.Blocks), bs, r.OutputTokens)
	}
	if _, dup := m.jobs[id]; dup {
		return fmt.Errorf("engine: request id %d already submitted and not ended", id)
	}
	j := m.newJob()
	j.id, j.r, j.blocks, j.arrived = id, r, r.Blocks, at
	j.reserve = ReserveBlocks(r.PromptTokens, len(r.Blocks), r.OutputTokens, bs)
	if need := len(j.blocks) + j.reserve; need > m.cfg.KVBlocks {
		if !m.cfg.ClipOversize {
			m.free = append(m.free, j)
			return fmt.Errorf("%w: %d blocks of %d tokens (%d prompt + %d output), over the %d blocks", ErrTooLong,
				need, bs, r.PromptTokens, r.OutputTokens, m.cfg.KVBlocks)
		}
		j.reserve = min(j.reserve, m.cfg.KVBlocks)
		j.blocks = j.blocks[:m.cfg.KVBlocks-j.reserve]
	}
	m.Advance(at)
	m.jobs[id] = j
	m.queue = append(m.queue, j)
	m.schedule()
	return nil
}

// Next is the time of the next scheduled step; false when none is
// scheduled (nothing runs).
func (m *Model) Next() (float64, bool) {
	for m.steps.len() > 0 {
		s := m.steps.top()
		if s.gen == s.j.gen {
			return s.at, true
		}
		m.steps.pop()
	}
	return 0, false
}

// Advance carries out every step due by t (seconds), in time order, and
// sets the model's time to t (never back).
func (m *Model) Advance(t float64) {
	for m.steps.len() > 0 && m.steps.top().at <= t {
		s := m.steps.pop()
		if s.gen != s.j.gen {
			continue
		}
		m.now = max(m.now, s.at)
		m.step(s.j, s.at)
	}
	m.now = max(m.now, t)
}

// Cancel steps the model to time at and stops request id wherever it
// is; false when it is unknown or already ended.
func (m *Model) Cancel(id ID, at float64) (Stage, bool) {
	m.Advance(at)
	j, ok := m.jobs[id]
	if !ok {
		return "", false
	}
	stage := StageDecode
	switch {
	case j.state == stateWaiting:
		stage = StageWaiting
		m.queue = slices.DeleteFunc(m.queue, func(q *job) bool { return q == j })
	case j.state == statePrefill:
		stage = StagePrefill
		m.prefilling = nil
		m.release(j)
		for _, run := range j.stored {
			m.cache.Drop(j.blocks[run.Start:run.End])
		}
	default:
		m.release(j)
	}
	m.end(j)
	m.schedule()
	return stage, true
}

// schedule starts the next prefill when none runs: the head of the queue
// (or the first the Gate admits), once its blocks fit beside what the
// running requests hold.
func (m *Model) schedule() {
	if m.prefilling != nil || len(m.queue) == 0 {
		return
	}
	i := 0
	if g := m.cfg.Gate; g != nil {
		if i = slices.IndexFunc(m.queue, func(j *job) bool { return g.Admissible(j.id) }); i < 0 {
			return
		}
	}
	j := m.queue[i]
	// Room for every pinned block besides the request's own fits it
	// surely; only a fuller cache needs Fits's pass over its blocks.
	room := m.cfg.KVBlocks - m.reserved - j.reserve
	if m.cache.PinnedBlocks()+len(j.blocks) > room && !m.cache.Fits(j.blocks, m.reserved+j.reserve) {
		return
	}
	m.queue = slices.Delete(m.queue, i, i+1)
	cached := CachedTokens(m.cache.CachedRun(j.blocks), j.r.PromptTokens, m.cfg.BlockSize)
	j.pinned = m.cache.AdmitPinned(j.blocks, &m.adm, m.reserved+j.reserve)
	m.reserved += j.reserve
	m.running++
	j.stored = append(j.stored[:0], m.adm.Stored...)
	prefill := m.cfg.PrefillSeconds(j.r.PromptTokens, cached, j.r.PullPerBlock)
	if g := m.cfg.Gate; g != nil {
		prefill += g.Starting(j.id)
	}
	j.state = statePrefill
	j.first = m.now + prefill
	m.prefilling, m.prefillFree = j, j.first
	m.steps.push(j.first, j)
	m.ev = Event{Kind: Started, ID: j.id, At: m.now, Arrived: j.arrived, CachedTokens: cached, Prefill: prefill,
		FirstTokenAt: j.first, DoneAt: j.first + m.cfg.DecodeSeconds(j.r.OutputTokens),
		Blocks: j.blocks[:j.pinned:j.pinned], Reserve: j.reserve, Stored: j.stored, Evicted: m.adm.Evicted}
	m.emit(&m.ev)
}

// step carries out j's step due at at: its prefill's end (the first
// token), a decode step, or its last token.
func (m *Model) step(j *job, at float64) {
	if j.state == statePrefill {
		m.prefilling = nil
		j.state, j.tokens = stateDecode, 1
		m.ev = Event{Kind: FirstToken, ID: j.id, At: at, Arrived: j.arrived, Tokens: 1, Blocks: j.blocks[:j.pinned:j.pinned], Stored: j.stored}
		m.emit(&m.ev)
		m.decodeNext(j, at)
		m.schedule()
		return
	}
	if m.cfg.EachToken {
		j.tokens++
	} else {
		j.tokens = max(1, j.r.OutputTokens)
	}
	if j.tokens < j.r.OutputTokens {
		m.ev = Event{Kind: Token, ID: j.id, At: at, Arrived: j.arrived, Tokens: j.tokens}
		m.emit(&m.ev)
	}
	m.decodeNext(j, at)
}

// decodeNext schedules j's next token, or ends it at at after its last.
func (m *Model) decodeNext(j *job, at float64) {
	n := j.r.OutputTokens
	if j.tokens >= n {
		m.release(j)
		m.ev = Event{Kind: Done, ID: j.id, At: at, Arrived: j.arrived, Tokens: j.tokens}
		m.end(j)
		m.emit(&m.ev)
		m.schedule()
		return
	}
	next := j.first + m.cfg.DecodeSeconds(n)
	if m.cfg.EachToken {
		next = j.first + m.cfg.DecodeSeconds(j.tokens+1)
	}
	m.steps.push(next, j)
}

// release gives back what a running request held.
func (m *Model) release(j *job) {
	m.cache.Unpin(j.blocks[:j.pinned])
	m.reserved -= j.reserve
	m.running--
	if g := m.cfg.Gate; g != nil {
		g.Stopped(j.id)
	}
}
