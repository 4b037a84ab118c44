package pickerload

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxEntries is the default bound on the (picker, replica) entries
// a Store holds: 64 gateways × 1,024 replicas, a few MiB.
const DefaultMaxEntries = 65536

// ErrFull is wrapped by the error of a report that would take the store
// past its bound on (picker, replica) entries. The report is refused
// whole; what the store held stays as it was. It clears once other
// pickers stop reporting (their reports expire) or report fewer replicas.
var ErrFull = errors.New("picker load store full")

// Config configures a Store.
type Config struct {
	// MaxEntries bounds the (picker, replica) entries held, over all
	// pickers; a picker whose report lists no replica counts as one
	// entry. 0 = DefaultMaxEntries.
	MaxEntries int
	// Now is the clock that stamps a report's arrival and decides its
	// expiry; only differences of its readings are used, so a clock that
	// keeps time.Now's monotonic reading is immune to wall-clock steps.
	// nil = time.Now.
	Now func() time.Time
}

// Outcome is what Put did with a valid report.
type Outcome int

const (
	// Stored: the report replaced what the store held for its picker.
	Stored Outcome = iota
	// Ignored: the store holds an unexpired report of the picker with the
	// same or a higher sequence (a report overtaken on its way, or sent
	// twice); nothing changed.
	Ignored
)

// Sum is the load the other pickers routed to one replica, summed over
// their unexpired reports (saturating at each field's maximum).
type Sum struct {
	PrefillingRequests uint32
	PrefillTokens      uint64
	RunningRequests    uint32
	// Pickers is how many pickers' reports were summed.
	Pickers uint32
}

// Picker is one picker's report as the store holds it (Store.Pickers).
type Picker struct {
	ID string
	// Replicas is how many replicas the report lists; the totals are
	// over them.
	Replicas                            int
	PrefillingRequests, RunningRequests uint64
	PrefillTokens                       uint64
	Sequence                            uint64
	Interval                            time.Duration
	// Age is how long ago the report arrived.
	Age time.Duration
}

// Stats are a Store's counters since it was made, and what it holds now.
type Stats struct {
	// Stored and Ignored count valid reports by Outcome; Refused counts
	// reports refused (invalid, or ErrFull); Expired counts pickers whose
	// report expired and was dropped.
	Stored, Ignored, Refused, Expired uint64
	// Entries is the (picker, replica) entries held now (a picker with no
	// replica counts one), Pickers the pickers.
	Entries, Pickers int
}

// contrib is one picker's load on one replica, with the report's expiry.
type contrib struct {
	picker     string
	expires    int64 // store clock ns
	prefilling uint32
	running    uint32
	tokens     uint64
}

// cell holds one replica's contributions: an immutable slice replaced
// whole by writers, so readers take no lock.
type cell struct {
	p atomic.Pointer[[]contrib]
}

type held struct {
	seq      uint64
	interval time.Duration
	received int64 // store clock ns
	expires  int64
	loads    []ReplicaLoad
}

// Store holds the pickers' latest reports. Safe for concurrent use; reads
// (At, View.Others) take no lock.
type Store struct {
	limit int
	clock func() time.Time
	base  time.Time

	mu        sync.Mutex // serializes writers
	pickers   map[string]*held
	entries   int
	nextSweep int64 // earliest expiry held (math.MaxInt64 = none)
	cells     sync.Map

	stored, ignored, refused, expired atomic.Uint64
	entriesGauge, pickersGauge        atomic.Int64
}

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{limit: cfg.MaxEntries, clock: cfg.Now, base: cfg.Now(), pickers: map[string]*held{}, nextSweep: math.MaxInt64}
}

// MaxEntries is the bound on (picker, replica) entries.
func (s *Store) MaxEntries() int { return s.limit }

// now is the store clock in ns since the store was made.
func (s *Store) now() int64 { return int64(s.clock().Sub(s.base)) }

func weight(replicas int) int { return max(1, replicas) }

// Put validates r and, unless the store holds a newer unexpired report of
// the same picker, replaces that picker's report with it (contract
// §5.11). Errors: a *FieldError (wrapping ErrInvalid) for a report that
// breaks a rule of Report; an error wrapping ErrFull, naming the field
// "loads" and the limit, when holding it would pass MaxEntries (nothing
// held changes). r.Loads is copied.
func (s *Store) Put(r Report) (Outcome, error) {
	if len(r.Loads) > s.limit {
		// Refused before validating: checking a report of a million
		// replicas for repeats would cost more than refusing it.
		s.refused.Add(1)
		return Stored, fmt.Errorf("%w: loads: %d replicas in one report, over the node's limit of %d (picker, replica) entries", ErrFull, len(r.Loads), s.limit)
	}
	if err := r.Validate(); err != nil {
		s.refused.Add(1)
		return Stored, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now >= s.nextSweep {
		s.sweepLocked(now)
	}
	old := s.pickers[r.PickerID]
	if old != nil && r.Sequence <= old.seq {
		s.ignored.Add(1)
		return Ignored, nil
	}
	ow := 0
	if old != nil {
		ow = weight(len(old.loads))
	}
	if after := s.entries - ow + weight(len(r.Loads)); after > s.limit {
		s.refused.Add(1)
		return Stored, fmt.Errorf("%w: loads: %d replicas for picker %q would make %d (picker, replica) entries, over the node's limit of %d; the pickers of this cluster report too many replicas",
			ErrFull, len(r.Loads), r.PickerID, after, s.limit)
	}
	interval := r.interval()
	received := now - int64(max(0, r.Age))
	expires := received + ExpiryIntervals*int64(interval)
	if expires <= now {
		// It expired on the way (a peer's queue held it that long): the
		// picker's newer reports are what count.
		s.ignored.Add(1)
		return Ignored, nil
	}
	h := &held{seq: r.Sequence, interval: interval, received: received, expires: expires,
		loads: slices.Clone(r.Loads)}
	var fresh map[string]struct{}
	if old != nil && len(old.loads) > 0 {
		fresh = make(map[string]struct{}, len(h.loads))
		for i := range h.loads {
			fresh[h.loads[i].ReplicaID] = struct{}{}
		}
		for i := range old.loads {
			if _, again := fresh[old.loads[i].ReplicaID]; !again {
				s.rebuild(old.loads[i].ReplicaID, r.PickerID, nil)
			}
		}
	}
	for i := range h.loads {
		l := &h.loads[i]
		s.rebuild(l.ReplicaID, r.PickerID, &contrib{picker: r.PickerID, expires: h.expires,
			prefilling: l.PrefillingRequests, running: l.RunningRequests, tokens: l.PrefillTokens})
	}
	s.pickers[r.PickerID] = h
	s.entries += weight(len(h.loads)) - ow
	s.nextSweep = min(s.nextSweep, h.expires)
	s.stored.Add(1)
	s.publishGauges()
	return Stored, nil
}

// rebuild publishes replica's contributions with picker's replaced by c
// (nil = removed). Called with mu held.
func (s *Store) rebuild(replica, picker string, c *contrib) {
	var cur []contrib
	v, ok := s.cells.Load(replica)
	if ok {
		cur = *v.(*cell).p.Load()
	}
	next := make([]contrib, 0, len(cur)+1)
	for _, x := range cur {
		if x.picker != picker {
			next = append(next, x)
		}
	}
	if c != nil {
		next = append(next, *c)
	}
	if len(next) == 0 {
		if ok {
			s.cells.Delete(replica)
		}
		return
	}
	if !ok {
		nc := &cell{}
		nc.p.Store(&next)
		s.cells.Store(replica, nc)
		return
	}
	v.(*cell).p.Store(&next)
}

// Sweep drops the reports that have expired and returns how many. Reads
// ignore expired reports already; Sweep frees their memory and entries
// (the owner calls it about once per DefaultInterval).
func (s *Store) Sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepLocked(s.now())
}

// sweepLocked drops every expired report. Each replica they touch is
// rebuilt once, without all of them: one rebuild per expired picker would
// copy a replica shared by P pickers P times, quadratic when a fleet of
// gateways expires together.
func (s *Store) sweepLocked(now int64) int {
	next := int64(math.MaxInt64)
	var gone map[string]struct{}
	var touched []string
	for id, h := range s.pickers {
		if h.expires > now {
			next = min(next, h.expires)
			continue
		}
		if gone == nil {
			gone = map[string]struct{}{}
		}
		gone[id] = struct{}{}
		for i := range h.loads {
			touched = append(touched, h.loads[i].ReplicaID)
		}
		s.entries -= weight(len(h.loads))
		delete(s.pickers, id)
	}
	slices.Sort(touched)
	for _, replica := range slices.Compact(touched) {
		s.rebuildWithout(replica, gone)
	}
	s.nextSweep = next
	s.expired.Add(uint64(len(gone)))
	s.publishGauges()
	return len(gone)
}

// rebuildWithout publishes replica's contributions without those of the
// pickers in gone. Called with mu held.
func (s *Store) rebuildWithout(replica string, gone map[string]struct{}) {
	v, ok := s.cells.Load(replica)
	if !ok {
		return
	}
	c := v.(*cell)
	cur := *c.p.Load()
	next := make([]contrib, 0, len(cur))
	for _, x := range cur {
		if _, drop := gone[x.picker]; !drop {
			next = append(next, x)
		}
	}
	if len(next) == 0 {
		s.cells.Delete(replica)
		return
	}
	c.p.Store(&next)
}

func (s *Store) publishGauges() {
	s.entriesGauge.Store(int64(s.entries))
	s.pickersGauge.Store(int64(len(s.pickers)))
}

// View is a read of the store at one instant (Store.At).
type View struct {
	s   *Store
	now int64
}

// At returns a view at the store clock's current reading: a lookup reads
// the clock once and sums every replica it answers for at that instant.
func (s *Store) At() View { return View{s: s, now: s.now()} }

// Others sums the unexpired reports on replica of every picker but asker
// ("" = every picker). It takes no lock and does not allocate.
func (v View) Others(asker, replica string) Sum {
	var out Sum
	c, ok := v.s.cells.Load(replica)
	if !ok {
		return out
	}
	for _, x := range *c.(*cell).p.Load() {
		if x.expires <= v.now || x.picker == asker {
			continue
		}
		out.PrefillingRequests = addSat32(out.PrefillingRequests, x.prefilling)
		out.RunningRequests = addSat32(out.RunningRequests, x.running)
		if out.PrefillTokens > math.MaxUint64-x.tokens {
			out.PrefillTokens = math.MaxUint64
		} else {
			out.PrefillTokens += x.tokens
		}
		out.Pickers++
	}
	return out
}

// Replicas calls fn with every replica some picker other than asker has
// an unexpired report on, in no particular order. For answers that list
// replicas beyond those with stats; it takes no lock.
func (v View) Replicas(asker string, fn func(replica string)) {
	v.s.cells.Range(func(k, c any) bool {
		for _, x := range *c.(*cell).p.Load() {
			if x.expires > v.now && x.picker != asker {
				fn(k.(string))
				break
			}
		}
		return true
	})
}

func addSat32(a, b uint32) uint32 {
	if a > math.MaxUint32-b {
		return math.MaxUint32
	}
	return a + b
}

// Pickers returns every unexpired report held, by picker id ascending,
// with its totals over its replicas (for the live view and status).
func (s *Store) Pickers() []Picker {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]Picker, 0, len(s.pickers))
	for id, h := range s.pickers {
		if h.expires <= now {
			continue
		}
		p := Picker{ID: id, Replicas: len(h.loads), Sequence: h.seq, Interval: h.interval, Age: time.Duration(now - h.received)}
		for _, l := range h.loads {
			p.PrefillingRequests += uint64(l.PrefillingRequests)
			p.RunningRequests += uint64(l.RunningRequests)
			p.PrefillTokens += l.PrefillTokens
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Picker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Stats returns the counters and sizes; it takes no lock.
func (s *Store) Stats() Stats {
	return Stats{Stored: s.stored.Load(), Ignored: s.ignored.Load(), Refused: s.refused.Load(), Expired: s.expired.Load(),
		Entries: int(s.entriesGauge.Load()), Pickers: int(s.pickersGauge.Load())}
}
