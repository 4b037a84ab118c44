package provisional

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Store.
type Config struct {
	// MaxBlocks bounds the (pick, block) entries held, over all pickers;
	// 0 = DefaultMaxBlocks.
	MaxBlocks int
	// Now is the clock that stamps a pick's arrival and decides its
	// expiry; only differences of its readings are used (a virtual clock
	// drives the store in a simulation). nil = time.Now.
	Now func() time.Time
}

// Result is what Apply did with a valid push.
type Result struct {
	// Added counts the picks the push added, Removed the picks it dropped
	// (removals, and for a full state the picks it no longer lists).
	Added, Removed int
	// Superseded: a full state not newer than the last one held of the
	// picker; nothing changed.
	Superseded bool
}

// Stats are a Store's counters since it was made, and what it holds now.
type Stats struct {
	// Added, Removed, Confirmed and Expired count picks by how they came
	// and went; Ignored counts picks not added (held already, removed
	// already, older than the picker's last full state, or expired on the
	// way); Refused counts pushes refused (invalid, or ErrFull).
	Added, Removed, Confirmed, Expired, Ignored, Refused uint64
	// Blocks is the (pick, block) entries held now, Picks the picks,
	// Pickers the pickers with picks.
	Blocks, Picks, Pickers int
}

// held is one pick as the store holds it.
type held struct {
	picker  string
	id      uint64
	part    Partition
	replica string
	hashes  []uint64
	cum     []uint32 // tokens through block i
	seq     uint64   // the push that added it
	cached  uint32   // Pick.CachedTokens
	// prefilled: the request has its first token (Push.Prefilled, or
	// Pick.Prefilled in a full state); set under mu, read under the read
	// lock.
	prefilled bool
	made      int64 // store clock ns
	expires   int64
}

// holder is one pick's claim on one block: its position in the pick's
// chain.
type holder struct {
	p   *held
	pos int32
}

type pickerState struct {
	lastFull uint64
	picks    map[uint64]*held
	tombs    map[uint64]tomb // removals seen, by pick id
	seen     int64
}

type tomb struct {
	seq     uint64
	expires int64
}

// Store holds the provisional residencies of every picker. Safe for
// concurrent use: reads take a read lock.
type Store struct {
	limit int
	clock func() time.Time
	base  time.Time

	mu      sync.RWMutex
	parts   map[Partition]map[uint64][]holder
	pickers map[string]*pickerState
	blocks  int
	picks   int
	tombs   int

	added, removed, confirmed, expired, ignored, refused atomic.Uint64
}

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.MaxBlocks <= 0 {
		cfg.MaxBlocks = DefaultMaxBlocks
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{limit: cfg.MaxBlocks, clock: cfg.Now, base: cfg.Now(),
		parts: map[Partition]map[uint64][]holder{}, pickers: map[string]*pickerState{}}
}

// MaxBlocks is the bound on (pick, block) entries.
func (s *Store) MaxBlocks() int { return s.limit }

// now is the store clock in ns since the store was made.
func (s *Store) now() int64 { return int64(s.clock().Sub(s.base)) }

// ApplyThen applies push (Apply) and then, unless it was refused as
// invalid, calls after (nil: nothing): what a push carries besides its
// picks (its load report, contract §5.13) is held after them, so a lookup
// that reads it finds the picks that explain it. A push refused for a full
// store still calls after: what it carries is true either way. Apply's
// result and error are returned.
func (s *Store) ApplyThen(push Push, after func()) (Result, error) {
	res, err := s.Apply(push)
	if after != nil && !errors.Is(err, ErrInvalid) {
		after()
	}
	return res, err
}

// Apply validates push and applies it (contract §5.12; the rules of
// order, duplication and loss are the package's). Errors: a *FieldError
// wrapping ErrInvalid; an error wrapping ErrFull, naming the field
// "picks" and the limit, when the picks it adds would take the store
// past MaxBlocks (nothing held changes). The push's slices are copied.
func (s *Store) Apply(push Push) (Result, error) {
	if err := push.Validate(); err != nil {
		s.refused.Add(1)
		return Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ps := s.pickers[push.PickerID]
	if ps == nil {
		ps = &pickerState{picks: map[uint64]*held{}, tombs: map[uint64]tomb{}}
		s.pickers[push.PickerID] = ps
	}
	ps.seen = now
	if push.Full && push.Sequence <= ps.lastFull {
		s.ignored.Add(uint64(len(push.Picks)))
		return Result{Superseded: true}, nil
	}
	var listed map[uint64]struct{}
	if push.Full {
		listed = make(map[uint64]struct{}, len(push.Picks))
		for i := range push.Picks {
			listed[push.Picks[i].ID] = struct{}{}
		}
	}
	// What the push would drop and add, before changing anything, so a
	// push past the bound is refused whole.
	freed, adding := s.pushBlocks(ps, &push, listed, now)
	if after := s.blocks - freed + adding; adding > 0 && after > s.limit {
		s.refused.Add(1)
		return Result{}, fmt.Errorf("%w: picks: %d blocks from picker %q would make %d provisional (pick, block) entries, over the node's limit of %d; too many requests in flight with long prompts for this node's bound",
			ErrFull, adding, push.PickerID, after, s.limit)
	}
	var res Result
	res.Removed = s.applyRemovals(ps, &push, listed, now)
	s.removed.Add(uint64(res.Removed))
	res.Added = s.applyAdds(ps, &push, now)
	s.added.Add(uint64(res.Added))
	for _, id := range push.Prefilled {
		if h := ps.picks[id]; h != nil {
			h.prefilled = true
		}
	}
	if push.Full {
		ps.lastFull = push.Sequence
	}
	return res, nil
}

// superseded reports whether held pick h of a picker is dropped by full
// push (listing the ids in listed): not listed, and from an earlier push.
func superseded(push *Push, listed map[uint64]struct{}, id uint64, h *held) bool {
	_, ok := listed[id]
	return !ok && h.seq < push.Sequence
}

// pushBlocks counts the (pick, block) entries push would free (picks it
// supersedes or removes) and add, without changing anything.
func (s *Store) pushBlocks(ps *pickerState, push *Push, listed map[uint64]struct{}, now int64) (freed, adding int) {
	if push.Full {
		for id, h := range ps.picks {
			if superseded(push, listed, id, h) {
				freed += len(h.hashes)
			}
		}
	}
	for _, id := range push.Removed {
		if h := ps.picks[id]; h != nil {
			freed += len(h.hashes)
		}
	}
	for i := range push.Picks {
		if s.wouldAdd(ps, push, &push.Picks[i], now) {
			adding += len(push.Picks[i].Hashes)
		}
	}
	return freed, adding
}

// applyRemovals drops the picks a full push supersedes (and the older
// tombstones) and the picks push removes, leaving a tombstone for each
// removed id while the node's tombstone bound allows. It returns how many
// picks it dropped.
func (s *Store) applyRemovals(ps *pickerState, push *Push, listed map[uint64]struct{}, now int64) int {
	removed := 0
	if push.Full {
		for id, h := range ps.picks {
			if superseded(push, listed, id, h) {
				s.drop(ps, h)
				removed++
			}
		}
		for id, t := range ps.tombs {
			if t.seq < push.Sequence {
				delete(ps.tombs, id)
				s.tombs--
			}
		}
	}
	for _, id := range push.Removed {
		if h := ps.picks[id]; h != nil {
			s.drop(ps, h)
			removed++
		}
		if _, ok := ps.tombs[id]; !ok && s.tombs < maxTombstones {
			ps.tombs[id] = tomb{seq: push.Sequence, expires: now + int64(MaxMaxAge)}
			s.tombs++
		}
	}
	return removed
}

// applyAdds holds push's picks that wouldAdd admits, counting the others
// as ignored, and returns how many it added.
func (s *Store) applyAdds(ps *pickerState, push *Push, now int64) int {
	added := 0
	for i := range push.Picks {
		k := &push.Picks[i]
		if !s.wouldAdd(ps, push, k, now) {
			if h := ps.picks[k.ID]; h != nil && k.Prefilled {
				h.prefilled = true // a full state repairs a lost Prefilled
			}
			s.ignored.Add(1)
			continue
		}
		s.add(ps, push.PickerID, push.Sequence, k, now-int64(k.Age+push.Age))
		added++
	}
	return added
}

// wouldAdd says whether Apply adds k: not held, not removed, not older
// than the picker's last full state, not expired on its way.
func (s *Store) wouldAdd(ps *pickerState, push *Push, k *Pick, now int64) bool {
	if _, ok := ps.picks[k.ID]; ok || len(k.Hashes) == 0 {
		return false
	}
	if t, ok := ps.tombs[k.ID]; ok && (!push.Full || t.seq > push.Sequence) {
		return false
	}
	if slices.Contains(push.Removed, k.ID) {
		return false
	}
	if !push.Full && push.Sequence < ps.lastFull {
		return false // the newer full state says whether it lives
	}
	return now-int64(k.Age+push.Age)+int64(k.maxAge()) > now
}

// add indexes k, made at store time made. Called with mu held.
func (s *Store) add(ps *pickerState, picker string, seq uint64, k *Pick, made int64) {
	h := &held{picker: picker, id: k.ID, part: k.Partition, replica: k.Replica, hashes: slices.Clone(k.Hashes),
		cum: make([]uint32, len(k.Hashes)), seq: seq, cached: k.CachedTokens, prefilled: k.Prefilled, made: made, expires: made + int64(k.maxAge())}
	var t uint32
	for i := range h.cum {
		c := uint32(16)
		if len(k.Counts) == len(k.Hashes) {
			c = k.Counts[i]
		}
		t = min(t+c, math.MaxUint32-4096)
		h.cum[i] = t
	}
	blocks := s.parts[h.part]
	if blocks == nil {
		blocks = map[uint64][]holder{}
		s.parts[h.part] = blocks
	}
	for _, i := range h.indexed() {
		x := h.hashes[i]
		blocks[x] = append(blocks[x], holder{p: h, pos: int32(i)})
	}
	ps.picks[k.ID] = h
	s.blocks += len(h.hashes)
	s.picks++
}

// indexed are the positions of h's blocks the store indexes: its root,
// which every lookup of a prompt sharing its first block names first,
// and its last block, which a lookup by the prompt's prefix hash alone
// names. Two map entries a pick, whatever its length: a lookup compares
// the rest of its chain with the pick's hashes.
func (h *held) indexed() []int {
	if len(h.hashes) == 1 {
		return []int{0}
	}
	return []int{0, len(h.hashes) - 1}
}

// drop unindexes h. Called with mu held.
func (s *Store) drop(ps *pickerState, h *held) {
	if blocks := s.parts[h.part]; blocks != nil {
		for _, i := range h.indexed() {
			s.unhold(blocks, h.hashes[i], h)
		}
		if len(blocks) == 0 {
			delete(s.parts, h.part)
		}
	}
	s.blocks -= len(h.hashes)
	delete(ps.picks, h.id)
	s.picks--
}

// unhold removes h's claim on block x, reporting whether it had one.
func (s *Store) unhold(blocks map[uint64][]holder, x uint64, h *held) bool {
	hs := blocks[x]
	i := slices.IndexFunc(hs, func(c holder) bool { return c.p == h })
	if i < 0 {
		return false
	}
	if len(hs) == 1 {
		delete(blocks, x)
		return true
	}
	// Copy: readers may be ranging over the old slice.
	blocks[x] = slices.Delete(slices.Clone(hs), i, i+1)
	return true
}

// Confirm drops the picks on replica whose every block is among the
// first blocks of chain in part (a lookup's chain, root first, cut to the
// depth the confirmed index holds on replica): the engine's events put
// them in the index (contract §5.12). A pick reaching deeper than chain
// still claims its deeper blocks and stays. It returns the picks dropped.
func (s *Store) Confirm(part Partition, replica string, chain []uint64) int {
	if len(chain) == 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	blocks := s.parts[part]
	if blocks == nil {
		return 0
	}
	var gone []*held
	for _, c := range blocks[chain[0]] {
		if h := c.p; c.pos == 0 && h.replica == replica && len(h.hashes) <= len(chain) && commonPrefix(h.hashes, chain) == len(h.hashes) {
			gone = append(gone, h)
		}
	}
	for _, h := range gone {
		if ps := s.pickers[h.picker]; ps != nil {
			s.drop(ps, h)
		}
	}
	s.confirmed.Add(uint64(len(gone)))
	return len(gone)
}

// commonPrefix is how many leading elements a and b share.
func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Sweep drops the picks past their max age, and old tombstones and idle
// pickers, and returns the picks dropped. Reads ignore expired picks
// already; Sweep frees their memory (the owner calls it about once a
// second).
func (s *Store) Sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for id, ps := range s.pickers {
		for _, h := range ps.picks {
			if h.expires <= now {
				s.drop(ps, h)
				n++
			}
		}
		for pid, t := range ps.tombs {
			if t.expires <= now {
				delete(ps.tombs, pid)
				s.tombs--
			}
		}
		if len(ps.picks) == 0 && len(ps.tombs) == 0 && now-ps.seen > int64(MaxMaxAge) {
			delete(s.pickers, id)
		}
	}
	s.expired.Add(uint64(n))
	return n
}
