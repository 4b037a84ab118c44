// Package turns orders the picks that several gateways (pickers) make at
// one instant (contract §5.13). Gateways that share their picks (contract
// §5.12) see each other's only once a push has reached the node: requests
// that arrive at several gateways within that delay are decided on the
// same state, and every gateway sends its share to the replica that state
// makes cheapest. A turn closes that blind instant: a picker's lookup at
// the node that orders its model takes a turn, and another picker's lookup
// there waits (within a bound) until that turn is settled, which is when
// the picker's push of the pick it made reaches the node. The waiting
// lookup is then answered from a state that holds the pick.
//
// The table is pure bookkeeping on an injected clock: Take never blocks
// (it says what to wait for), so the server waits on channels (Wait) and
// a simulation on its virtual clock. A turn that is not settled lapses
// after Config.Hold (its picker died or decided nothing), and a table
// holds at most Config.MaxTurns turns: past it Take grants nothing, and
// the lookup is answered as if no turn were asked for.
package turns

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHold is how long an unsettled turn blocks the other pickers'
// lookups: well above a push's time to the node (about a millisecond on a
// LAN, 5 ms at p99 on a loaded 2-core machine), so a live picker's turn
// ends by its push, and short enough that a dead picker's turn costs the
// others one wait of at most this long.
const DefaultHold = 50 * time.Millisecond

// DefaultWait bounds a lookup's wait for its turn: below the gateways'
// default lookup budget (20 ms) by the lookup itself, and several pushes'
// time to the node, so a burst of requests at several gateways is
// ordered, each wait paid once per other picker's turn before it.
const DefaultWait = 15 * time.Millisecond

// DefaultMaxTurns bounds the outstanding turns of a table.
const DefaultMaxTurns = 1 << 16

// Config configures a Table.
type Config struct {
	// Hold is how long an unsettled turn blocks the others; 0 =
	// DefaultHold.
	Hold time.Duration
	// MaxTurns bounds the outstanding turns; 0 = DefaultMaxTurns.
	MaxTurns int
	// Now is the table's clock; nil = time.Now. Only differences of its
	// readings are used (a virtual clock drives it in a simulation).
	Now func() time.Time
}

// Table holds the outstanding turns, by key (the model a lookup names).
// Safe for concurrent use.
type Table struct {
	cfg   Config
	mu    sync.Mutex
	keys  map[string][]*turn // outstanding, oldest first
	ids   map[uint64]*turn
	next  uint64
	stats Stats
	// waiting counts the Wait calls in progress.
	waiting atomic.Int64
}

type turn struct {
	id     uint64
	key    string
	picker string
	lapse  time.Time
	done   chan struct{} // closed when settled or lapsed
}

// Stats are a Table's counters since it was made.
type Stats struct {
	Taken, Settled, Lapsed, Refused uint64
	// Outstanding is the turns held now; Waiting the lookups waiting for
	// one (Wait) now.
	Outstanding, Waiting int
}

// New returns an empty table.
func New(cfg Config) *Table {
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Table{cfg: cfg, keys: map[string][]*turn{}, ids: map[uint64]*turn{}}
}

// Take gives picker a turn in key when no other picker holds one there:
// its id (> 0), and busy nil. Otherwise id is 0 and busy is closed when
// the oldest other picker's turn there is settled or lapses, at the
// latest at lapse. A picker never waits for its own turns: it knows its
// own picks. With MaxTurns outstanding, or an empty picker or key, Take
// grants nothing and returns (0, nil).
func (t *Table) Take(key, picker string) (id uint64, busy <-chan struct{}, lapse time.Time) {
	if picker == "" || key == "" {
		return 0, nil, time.Time{}
	}
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.expire(key, now)
	for _, o := range q {
		if o.picker != picker {
			return 0, o.done, o.lapse
		}
	}
	if len(t.ids) >= t.cfg.MaxTurns {
		t.stats.Refused++
		return 0, nil, time.Time{}
	}
	t.next++
	x := &turn{id: t.next, key: key, picker: picker, lapse: now.Add(t.cfg.Hold), done: make(chan struct{})}
	t.keys[key] = append(q, x)
	t.ids[x.id] = x
	t.stats.Taken++
	return x.id, nil, time.Time{}
}

// expire drops key's turns that lapsed by now and returns those left
// (lock held).
func (t *Table) expire(key string, now time.Time) []*turn {
	q := t.keys[key]
	n := 0
	for n < len(q) && !q[n].lapse.After(now) {
		n++
	}
	if n == 0 {
		return q
	}
	for _, o := range q[:n] {
		delete(t.ids, o.id)
		close(o.done)
		t.stats.Lapsed++
	}
	q = append(q[:0], q[n:]...)
	if len(q) == 0 {
		delete(t.keys, key)
		return nil
	}
	t.keys[key] = q
	return q
}

// Settle ends picker's turns ids (the pick each was taken for has reached
// this node) and returns how many it ended; ids of other pickers, and
// ids not held (settled, lapsed, or taken at another node), are ignored.
func (t *Table) Settle(picker string, ids []uint64) int {
	if len(ids) == 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, id := range ids {
		x := t.ids[id]
		if x == nil || x.picker != picker {
			continue
		}
		delete(t.ids, id)
		q := t.keys[x.key]
		for i, o := range q {
			if o == x {
				q = append(q[:i], q[i+1:]...)
				break
			}
		}
		if len(q) == 0 {
			delete(t.keys, x.key)
		} else {
			t.keys[x.key] = q
		}
		close(x.done)
		n++
	}
	t.stats.Settled += uint64(n)
	return n
}

// Wait takes a turn for picker in key, waiting while other pickers hold
// one there, at most bound in all and never past ctx: the turn's id, or
// 0 when the bound or ctx ended first (the lookup is then answered
// without a turn, as before turns existed), and how long it waited.
func (t *Table) Wait(ctx context.Context, key, picker string, bound time.Duration) (id uint64, waited time.Duration) {
	start := t.cfg.Now()
	t.waiting.Add(1)
	defer t.waiting.Add(-1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for first := true; ; first = false {
		id, busy, lapse := t.Take(key, picker)
		if busy == nil {
			if first {
				return id, 0 // granted at once: no wait
			}
			return id, t.cfg.Now().Sub(start)
		}
		now := t.cfg.Now()
		left := bound - now.Sub(start)
		if left <= 0 {
			return 0, now.Sub(start)
		}
		wake := min(left, max(lapse.Sub(now), 0)+time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(wake)
		} else {
			timer.Reset(wake)
		}
		select {
		case <-busy:
		case <-timer.C:
		case <-ctx.Done():
			return 0, t.cfg.Now().Sub(start)
		}
	}
}

// Stats returns the counters and the turns outstanding now, the lapsed
// ones ended first.
func (t *Table) Stats() Stats {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for key := range t.keys {
		t.expire(key, now)
	}
	s := t.stats
	s.Outstanding, s.Waiting = len(t.ids), int(t.waiting.Load())
	return s
}
