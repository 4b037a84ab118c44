package engine

// EventKind is what happened to a request.
type EventKind uint8

// Event kinds, in the order a request goes through them.
const (
	// Started: its prefill started (its blocks admitted and pinned).
	Started EventKind = iota + 1
	// FirstToken: its prefill ended with its first token; its stored
	// blocks are computed (what vLLM announces in BlockStored).
	FirstToken
	// Token: a decode step produced a token that is not its last
	// (Config.EachToken only).
	Token
	// Done: its last token; its pins and reservation are released.
	Done
)

// Event is one step of one request. Times are in the caller's seconds.
type Event struct {
	Kind EventKind
	ID   ID
	// At is when it happened; Arrived is the request's submission time.
	At, Arrived float64
	// Tokens is the output tokens generated so far (FirstToken, Token,
	// Done).
	Tokens int
	// CachedTokens is the prompt tokens found cached (Started); Prefill
	// is the prefill's modelled duration in seconds (Started), Gate time
	// included.
	CachedTokens int
	Prefill      float64
	// FirstTokenAt and DoneAt are when its first and last tokens come as
	// scheduled at its start (Started; a cancellation stops it sooner).
	FirstTokenAt, DoneAt float64
	// Blocks are its pinned blocks: the leading prompt blocks admitted
	// (Started, FirstToken); Stored indexes them. Reserve is its reserved
	// blocks (Started).
	Blocks  []uint64
	Reserve int
	// Stored are the runs of Blocks newly stored by its admission
	// (Started, FirstToken); Evicted the blocks the admission evicted,
	// least recent first (Started).
	Stored  []BlockRun
	Evicted []uint64
}

// step is a request's next scheduled step; gen voids it when the job's
// generation moved on (cancelled, ended).
type step struct {
	at  float64
	seq uint64
	j   *job
	gen uint32
}

// steps is a min-heap of steps by time, then scheduling order (a binary
// heap by hand: container/heap would box every step).
type steps struct {
	h   []step
	seq uint64
}

func (s *steps) len() int { return len(s.h) }

func (s *steps) top() step { return s.h[0] }

func (s *steps) less(i, k int) bool {
	return s.h[i].at < s.h[k].at || s.h[i].at == s.h[k].at && s.h[i].seq < s.h[k].seq
}

func (s *steps) push(at float64, j *job) {
	s.seq++
	s.h = append(s.h, step{at: at, seq: s.seq, j: j, gen: j.gen})
	for i := len(s.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s.h[i], s.h[p] = s.h[p], s.h[i]
		i = p
	}
}

func (s *steps) pop() step {
	x := s.h[0]
	n := len(s.h) - 1
	s.h[0] = s.h[n]
	s.h[n] = step{}
	s.h = s.h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s.less(c+1, c) {
			c++
		}
		if !s.less(c, i) {
			break
		}
		s.h[i], s.h[c] = s.h[c], s.h[i]
		i = c
	}
	return x
}
