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
// The lookups waiting in a key take their turns in the order they came:
// a picker that already holds turns there does not take another while an
// earlier lookup of another picker waits, so a busy gateway cannot keep
// the others out. The table is bookkeeping on an injected clock: Take
// never blocks (it says what to wait for), so the server waits on
// channels (Wait) and a simulation on its virtual clock. A turn that is
// not settled lapses after Config.Hold (its picker died or decided
// nothing), and a table holds at most Config.MaxTurns turns: past it a
// lookup that would have had a turn gets none, and is answered as if it
// had not asked for one.
package turns

import (
	"context"
	"slices"
	"sync"
	"time"
)

// DefaultHold is how long an unsettled turn blocks the other pickers'
// lookups: well above a push's time to the node (about a millisecond on a
// LAN, 8 ms at p99 on a loaded 2-core machine), so a live picker's turn
// ends by its push, and short enough that a dead picker's turn costs the
// others one wait of at most this long.
const DefaultHold = 50 * time.Millisecond

// DefaultWait bounds a lookup's wait for its turn: several pushes' time to
// the node, so that a burst of requests at several gateways is ordered
// whole (a lookup late in the burst waits for every decision before it,
// one push each), each wait paid once per other picker's turn before it;
// below DefaultHold, past which the turn waited for is a dead picker's;
// and below the gateways' default lookup budget (50 ms) by the node's
// 5 ms margin. Chosen on the bench's generator (docs/eval/pickertune.md):
// 15, 25, 40, 60 and 100 ms give losses −0.461, −0.474, −0.479, −0.479
// and −0.479, the gain ending where the hold bounds every wait.
const DefaultWait = 40 * time.Millisecond

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

// Table holds the outstanding turns and the lookups waiting for one, by
// key (the model a lookup names). Safe for concurrent use.
type Table struct {
	cfg   Config
	mu    sync.Mutex
	keys  map[string]*keyState
	ids   map[uint64]*turn
	next  uint64
	stats Stats
}

// keyState is one key's turns and waiters.
type keyState struct {
	turns   []*turn   // outstanding, oldest first
	waiters []*Waiter // in the order they came
	// changed is closed, and replaced, whenever turns or waiters change:
	// every waiter then looks again.
	changed chan struct{}
}

// Waiter is one lookup's place among the lookups waiting for a turn in a
// key (Join), in the order they came: only the waiters of other pickers
// ahead of it hold it back. It takes its turn with Take and leaves with
// Leave. Wait drives one on channels and timers; a simulation drives one
// on its virtual clock, calling Take again whenever the key's turns or
// waiters may have changed.
type Waiter struct {
	t      *Table
	key    string
	picker string
}

type turn struct {
	id     uint64
	key    string
	picker string
	lapse  time.Time
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
	return &Table{cfg: cfg, keys: map[string]*keyState{}, ids: map[uint64]*turn{}}
}

// Take gives picker a turn in key when no other picker holds one there
// and no lookup of another picker waits there (Wait): its id (> 0), and
// busy nil. Otherwise id is 0 and busy is closed when the key's turns or
// waiters change; lapse is when the other picker's turn that blocks lapses
// (zero when a waiter blocks). A picker never waits for its own turns: it
// knows its own picks. With MaxTurns outstanding, or an empty picker or
// key, Take grants nothing and returns (0, nil).
func (t *Table) Take(key, picker string) (id uint64, busy <-chan struct{}, lapse time.Time) {
	return t.take(key, picker, nil)
}

// take is Take for the waiter w (nil: a lookup not waiting, behind every
// waiter).
func (t *Table) take(key, picker string, w *Waiter) (uint64, <-chan struct{}, time.Time) {
	if picker == "" || key == "" {
		return 0, nil, time.Time{}
	}
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ks := t.keys[key]
	if ks != nil {
		t.expire(key, ks, now)
		for _, o := range ks.turns {
			if o.picker != picker {
				return 0, ks.changed, o.lapse
			}
		}
		for _, x := range ks.waiters {
			if x == w {
				break
			}
			if x.picker != picker {
				return 0, ks.changed, time.Time{}
			}
		}
	}
	if len(t.ids) >= t.cfg.MaxTurns {
		for k, s := range t.keys {
			t.expire(k, s, now)
		}
		if len(t.ids) >= t.cfg.MaxTurns {
			t.stats.Refused++
			return 0, nil, time.Time{}
		}
	}
	if ks == nil {
		ks = &keyState{changed: make(chan struct{})}
		t.keys[key] = ks
	}
	t.next++
	x := &turn{id: t.next, key: key, picker: picker, lapse: now.Add(t.cfg.Hold)}
	ks.turns = append(ks.turns, x)
	t.ids[x.id] = x
	t.stats.Taken++
	ks.signal()
	return x.id, nil, time.Time{}
}

// signal wakes every waiter of the key to look again (lock held).
func (ks *keyState) signal() {
	close(ks.changed)
	ks.changed = make(chan struct{})
}

// expire ends key's turns that lapsed by now, and drops the key when
// nothing is left in it (lock held).
func (t *Table) expire(key string, ks *keyState, now time.Time) {
	n := 0
	for n < len(ks.turns) && !ks.turns[n].lapse.After(now) {
		n++
	}
	if n > 0 {
		for _, o := range ks.turns[:n] {
			delete(t.ids, o.id)
			t.stats.Lapsed++
		}
		ks.turns = append(ks.turns[:0], ks.turns[n:]...)
		ks.signal()
	}
	t.dropIfEmpty(key, ks)
}

// dropIfEmpty deletes key's state once it holds no turn and no waiter
// (lock held).
func (t *Table) dropIfEmpty(key string, ks *keyState) {
	if len(ks.turns) == 0 && len(ks.waiters) == 0 && t.keys[key] == ks {
		delete(t.keys, key)
	}
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
		ks := t.keys[x.key]
		if ks == nil {
			continue
		}
		if i := slices.Index(ks.turns, x); i >= 0 {
			ks.turns = slices.Delete(ks.turns, i, i+1)
		}
		ks.signal()
		t.dropIfEmpty(x.key, ks)
		n++
	}
	t.stats.Settled += uint64(n)
	return n
}

// Wait takes a turn for picker in key, waiting while other pickers hold
// one there or came to wait before it, at most bound in all and never
// past ctx: the turn's id, or 0 when the bound or ctx ended first (the
// lookup is then answered without a turn, as before turns existed), and
// how long it waited (0 when the turn was free at once).
func (t *Table) Wait(ctx context.Context, key, picker string, bound time.Duration) (id uint64, waited time.Duration) {
	start := t.cfg.Now()
	id, busy, lapse := t.Take(key, picker)
	if busy == nil {
		return id, 0
	}
	w := t.Join(key, picker)
	defer w.Leave()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := t.cfg.Now()
		left := bound - now.Sub(start)
		if left <= 0 {
			return 0, now.Sub(start)
		}
		wake := left
		if !lapse.IsZero() {
			wake = min(left, max(lapse.Sub(now), 0)+time.Millisecond)
		}
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
		if id, busy, lapse = w.Take(); busy == nil {
			return id, t.cfg.Now().Sub(start)
		}
	}
}

// Join puts picker's lookup among key's waiters, behind those already
// there, and returns its place. The caller calls Leave once it has its
// turn or stops waiting; until then it holds back the later lookups of
// other pickers.
func (t *Table) Join(key, picker string) *Waiter {
	w := &Waiter{t: t, key: key, picker: picker}
	t.mu.Lock()
	defer t.mu.Unlock()
	ks := t.keys[key]
	if ks == nil {
		ks = &keyState{changed: make(chan struct{})}
		t.keys[key] = ks
	}
	ks.waiters = append(ks.waiters, w)
	return w
}

// Take is Table.Take for the waiter: a turn unless another picker holds
// one in the key or a waiter of another picker came before it (the
// waiters behind it do not count), with the same results.
func (w *Waiter) Take() (id uint64, busy <-chan struct{}, lapse time.Time) {
	return w.t.take(w.key, w.picker, w)
}

// Leave takes the waiter out of its key's waiters and wakes the others:
// one behind it may now go. Leaving twice is harmless.
func (w *Waiter) Leave() {
	t := w.t
	t.mu.Lock()
	defer t.mu.Unlock()
	ks := t.keys[w.key]
	if ks == nil {
		return
	}
	if i := slices.Index(ks.waiters, w); i >= 0 {
		ks.waiters = slices.Delete(ks.waiters, i, i+1)
		ks.signal()
	}
	t.dropIfEmpty(w.key, ks)
}

// Stats returns the counters and the turns outstanding and lookups
// waiting now, the lapsed turns ended first.
func (t *Table) Stats() Stats {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	for k, ks := range t.keys {
		t.expire(k, ks, now)
		s.Waiting += len(ks.waiters)
	}
	s.Lapsed = t.stats.Lapsed
	s.Outstanding = len(t.ids)
	return s
}
