package provisional_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/provisional"
)

// clock is a hand-moved clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newStore(maxBlocks int) (*provisional.Store, *clock) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	return provisional.New(provisional.Config{MaxBlocks: maxBlocks, Now: c.Now}), c
}

var part = provisional.Partition{Scheme: "vllm", Model: "m"}

// pick is a pick of n blocks of 16 tokens whose hashes are base+0..n-1:
// two picks with the same base share their prefix.
func pick(id uint64, replica string, base uint64, n int) provisional.Pick {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = base + uint64(i)
	}
	return provisional.Pick{ID: id, Replica: replica, Partition: part, Hashes: hs}
}

func chain(base uint64, n int) []uint64 { return pick(0, "", base, n).Hashes }

func apply(t *testing.T, s *provisional.Store, p provisional.Push) provisional.Result {
	t.Helper()
	r, err := s.Apply(p)
	if err != nil {
		t.Fatalf("apply %s seq %d: %v", p.PickerID, p.Sequence, err)
	}
	return r
}

// matches returns replica → matched blocks for a chain.
func matches(s *provisional.Store, c []uint64) map[string]uint32 {
	return matchesBy(s, c, func(m provisional.Match) uint32 { return m.Blocks })
}

// matchesBy returns replica → field of its match for a chain.
func matchesBy(s *provisional.Store, c []uint64, field func(provisional.Match) uint32) map[string]uint32 {
	out := map[string]uint32{}
	for _, m := range s.At().Matches(nil, part, c) {
		out[m.Replica] = field(m)
	}
	return out
}

func TestMatches_DeepestBlockPerReplica(t *testing.T) {
	s, c := newStore(0)
	apply(t, s, provisional.Push{PickerID: "g1", Sequence: 1, Picks: []provisional.Pick{pick(1, "r1", 100, 4)}})
	c.Add(time.Millisecond)
	apply(t, s, provisional.Push{PickerID: "g2", Sequence: 1, Picks: []provisional.Pick{pick(1, "r2", 100, 2), pick(2, "r1", 100, 3)}})
	// A lookup of 6 blocks from the same root: r1 holds 4 (g1's pick), r2 holds 2.
	ms := s.At().Matches(nil, part, chain(100, 6))
	if len(ms) != 2 || ms[0].Replica != "r1" || ms[0].Blocks != 4 || ms[0].Tokens != 64 || ms[1].Replica != "r2" || ms[1].Blocks != 2 || ms[1].Tokens != 32 {
		t.Fatalf("matches = %+v, want r1 4 blocks 64 tokens, r2 2 blocks 32 tokens", ms)
	}
	// Another partition, or another root, matches nothing.
	if got := s.At().Matches(nil, provisional.Partition{Scheme: "vllm", Model: "other"}, chain(100, 6)); len(got) != 0 {
		t.Fatalf("other model: %+v", got)
	}
	if got := matches(s, chain(500, 6)); len(got) != 0 {
		t.Fatalf("other root: %+v", got)
	}
}

// A lookup by prefix hash alone (a chain of one hash) matches the picks
// whose last block it is; a chain from another root matches nothing.
func TestMatches_ByPrefixHashAlone(t *testing.T) {
	s, _ := newStore(0)
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{pick(1, "r1", 100, 5), pick(2, "r2", 100, 1)}})
	ms := s.At().Matches(nil, part, []uint64{104})
	if len(ms) != 1 || ms[0].Replica != "r1" || ms[0].Blocks != 5 || ms[0].Tokens != 80 {
		t.Fatalf("by the prefix hash of 5 blocks: %+v", ms)
	}
	if ms := s.At().Matches(nil, part, []uint64{100}); len(ms) != 2 || ms[0].Blocks != 1 || ms[1].Blocks != 1 {
		t.Fatalf("by the root: %+v, want r1 and r2 at 1 block", ms)
	}
	// A chain that leaves the pick's after 2 blocks matches 2.
	if got := matches(s, []uint64{100, 101, 9999}); got["r1"] != 2 {
		t.Fatalf("diverging chain: %v", got)
	}
}

func TestCounts_GiveTokens(t *testing.T) {
	s, _ := newStore(0)
	k := pick(1, "r1", 1, 3)
	k.Counts = []uint32{16, 16, 5}
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{k}})
	ms := s.At().Matches(nil, part, chain(1, 3))
	if len(ms) != 1 || ms[0].Tokens != 37 {
		t.Fatalf("matches = %+v, want 37 tokens (16+16+5)", ms)
	}
}

func TestExpiry_AtMaxAge(t *testing.T) {
	s, c := newStore(0)
	k := pick(1, "r1", 1, 2)
	k.MaxAge = 500 * time.Millisecond
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{k, pick(2, "r2", 1, 2)}})
	c.Add(499 * time.Millisecond)
	if got := matches(s, chain(1, 2)); got["r1"] != 2 {
		t.Fatalf("before max age: %v", got)
	}
	c.Add(time.Millisecond)
	if got := matches(s, chain(1, 2)); got["r1"] != 0 || got["r2"] != 2 {
		t.Fatalf("at max age: %v, want r1 gone, r2 (default max age) held", got)
	}
	if n := s.Sweep(); n != 1 {
		t.Fatalf("sweep dropped %d, want 1", n)
	}
	c.Add(provisional.DefaultMaxAge)
	if n := s.Sweep(); n != 1 || s.Stats().Blocks != 0 || s.Stats().Picks != 0 {
		t.Fatalf("after default max age: swept %d, stats %+v", n, s.Stats())
	}
}

// A pick re-sent in a full state keeps its first expiry (its age), and a
// pick whose age already passed its max age is not added.
func TestExpiry_DatedFromTheAge(t *testing.T) {
	s, c := newStore(0)
	k := pick(1, "r1", 1, 1)
	k.MaxAge, k.Age = time.Second, 900*time.Millisecond
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Full: true, Picks: []provisional.Pick{k}})
	c.Add(100 * time.Millisecond)
	if got := matches(s, chain(1, 1)); len(got) != 0 {
		t.Fatalf("a pick made 1 s ago with max age 1 s is held: %v", got)
	}
	k.ID, k.Age = 2, time.Second
	if r := apply(t, s, provisional.Push{PickerID: "g", Sequence: 2, Picks: []provisional.Pick{k}}); r.Added != 0 {
		t.Fatalf("expired on the way but added: %+v", r)
	}
}

func TestBound_RefusedWholeNothingLost(t *testing.T) {
	s, _ := newStore(10)
	apply(t, s, provisional.Push{PickerID: "g1", Sequence: 1, Picks: []provisional.Pick{pick(1, "r1", 1, 6)}})
	_, err := s.Apply(provisional.Push{PickerID: "g2", Sequence: 1, Picks: []provisional.Pick{pick(1, "r2", 50, 2), pick(2, "r2", 60, 3)}})
	if !errors.Is(err, provisional.ErrFull) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
	for _, want := range []string{"picks", "11", "limit of 10"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := matches(s, chain(1, 6)); got["r1"] != 6 {
		t.Fatalf("held pick lost: %v", got)
	}
	if got := matches(s, chain(50, 2)); len(got) != 0 {
		t.Fatalf("part of a refused push held: %v", got)
	}
	if st := s.Stats(); st.Blocks != 6 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A push that frees blocks as it adds fits: removal of the 6, add of 5.
	r := apply(t, s, provisional.Push{PickerID: "g1", Sequence: 2, Removed: []uint64{1}, Picks: []provisional.Pick{pick(2, "r1", 70, 5)}})
	if r.Added != 1 || r.Removed != 1 || s.Stats().Blocks != 5 {
		t.Fatalf("result %+v, stats %+v", r, s.Stats())
	}
}

func TestInvalid_NamesTheField(t *testing.T) {
	s, _ := newStore(0)
	long := pick(1, "r", 1, provisional.MaxBlocksPerPick+1)
	noScheme := pick(1, "r", 1, 1)
	noScheme.Partition.Scheme = ""
	badCounts := pick(1, "r", 1, 2)
	badCounts.Counts = []uint32{16}
	for _, c := range []struct {
		push  provisional.Push
		field string
	}{
		{provisional.Push{Sequence: 1}, "picker_id"},
		{provisional.Push{PickerID: "g"}, "sequence"},
		{provisional.Push{PickerID: "g\x00", Sequence: 1}, "picker_id"},
		{provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{pick(1, "", 1, 1)}}, "picks[0].replica_id"},
		{provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{pick(1, "r", 1, 0)}}, "picks[0].block_hashes"},
		{provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{long}}, "picks[0].block_hashes"},
		{provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{noScheme}}, "picks[0].hash_scheme"},
		{provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{badCounts}}, "picks[0].block_token_counts"},
	} {
		_, err := s.Apply(c.push)
		var fe *provisional.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, provisional.ErrInvalid) {
			t.Errorf("push %+v: err %v, want a FieldError on %s", c.push.PickerID, err, c.field)
		}
	}
}

func TestDuplicateAndOutOfOrder(t *testing.T) {
	s, _ := newStore(0)
	add := provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{pick(7, "r1", 1, 3)}}
	apply(t, s, add)
	if r := apply(t, s, add); r.Added != 0 || s.Stats().Blocks != 3 {
		t.Fatalf("duplicate add: %+v, stats %+v", r, s.Stats())
	}
	// The removal of pick 8 overtakes its add: the late add is ignored.
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 3, Removed: []uint64{8}})
	if r := apply(t, s, provisional.Push{PickerID: "g", Sequence: 2, Picks: []provisional.Pick{pick(8, "r2", 1, 3)}}); r.Added != 0 {
		t.Fatalf("late add of a removed pick added: %+v", r)
	}
	if got := matches(s, chain(1, 3)); got["r2"] != 0 || got["r1"] != 3 {
		t.Fatalf("matches %v, want only r1", got)
	}
	// A repeated removal changes nothing.
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 4, Removed: []uint64{7}})
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 4, Removed: []uint64{7}})
	if st := s.Stats(); st.Picks != 0 || st.Removed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A lost removal and a lost add are repaired by the next full state; a
// delta newer than the full state keeps what it brought; an older or
// repeated full state changes nothing.
func TestFullState_Repairs(t *testing.T) {
	s, _ := newStore(0)
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{pick(1, "r1", 1, 2)}}) // its removal is lost
	// The add of pick 2 (seq 2) is lost; pick 3 comes at seq 4, ahead of the full state of seq 3.
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 4, Picks: []provisional.Pick{pick(3, "r3", 1, 2)}})
	r := apply(t, s, provisional.Push{PickerID: "g", Sequence: 3, Full: true, Picks: []provisional.Pick{pick(2, "r2", 1, 2)}})
	if r.Added != 1 || r.Removed != 1 {
		t.Fatalf("full state: %+v, want pick 2 added, pick 1 dropped", r)
	}
	if got := matches(s, chain(1, 2)); got["r1"] != 0 || got["r2"] != 2 || got["r3"] != 2 {
		t.Fatalf("after the full state: %v, want r2 and r3", got)
	}
	// A delta older than the full state adds nothing: the full state says
	// what lives.
	if r := apply(t, s, provisional.Push{PickerID: "g", Sequence: 2, Picks: []provisional.Pick{pick(9, "r9", 1, 2)}}); r.Added != 0 {
		t.Fatalf("delta older than the full state: %+v", r)
	}
	// A full state listing pick 2 by id alone keeps it and adds nothing
	// for an id not held.
	if r := apply(t, s, provisional.Push{PickerID: "g", Sequence: 6, Full: true, Picks: []provisional.Pick{{ID: 2}, {ID: 3}, {ID: 77}}}); r.Added != 0 || r.Removed != 0 {
		t.Fatalf("full state by ids: %+v", r)
	}
	if got := matches(s, chain(1, 2)); got["r2"] != 2 || got["r3"] != 2 {
		t.Fatalf("after a full state by ids: %v", got)
	}
	if r := apply(t, s, provisional.Push{PickerID: "g", Sequence: 3, Full: true}); !r.Superseded {
		t.Fatalf("repeated full state: %+v, want superseded", r)
	}
	if got := matches(s, chain(1, 2)); got["r2"] != 2 {
		t.Fatalf("a superseded full state dropped picks: %v", got)
	}
	// Another picker's picks are untouched by g's full state.
	apply(t, s, provisional.Push{PickerID: "h", Sequence: 1, Picks: []provisional.Pick{pick(1, "r5", 1, 1)}})
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 7, Full: true})
	if got := matches(s, chain(1, 2)); len(got) != 1 || got["r5"] != 1 {
		t.Fatalf("after g's empty full state: %v, want only h's r5", got)
	}
}

func TestConfirm_DropsWhatTheIndexHolds(t *testing.T) {
	s, _ := newStore(0)
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{pick(1, "r1", 1, 4), pick(2, "r2", 1, 4)}})
	// The engine of r1 reported the first 2 blocks: the pick still
	// claims the other 2 (and so the whole prefix).
	if n := s.Confirm(part, "r1", chain(1, 2)); n != 0 {
		t.Fatalf("partial confirm dropped %d picks", n)
	}
	if got := matches(s, chain(1, 4)); got["r1"] != 4 || s.Stats().Blocks != 8 {
		t.Fatalf("after a partial confirm: %v, stats %+v", got, s.Stats())
	}
	if n := s.Confirm(part, "r1", chain(1, 4)); n != 1 {
		t.Fatalf("full confirm dropped %d picks, want 1", n)
	}
	if got := matches(s, chain(1, 4)); got["r1"] != 0 || got["r2"] != 4 {
		t.Fatalf("after confirm on r1: %v, want only r2", got)
	}
	if st := s.Stats(); st.Confirmed != 1 || st.Blocks != 4 || st.Picks != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLive_IsTheFullState(t *testing.T) {
	s, c := newStore(0)
	k := pick(2, "r1", 1, 2)
	k.Counts = []uint32{16, 3}
	apply(t, s, provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{k, pick(1, "r2", 9, 1)}})
	c.Add(40 * time.Millisecond)
	live := s.Live("g", 0)
	if len(live) != 2 || live[0].ID != 1 || live[1].ID != 2 || live[1].Counts[1] != 3 || live[0].Counts != nil || live[1].Age != 40*time.Millisecond || live[1].MaxAge != provisional.DefaultMaxAge {
		t.Fatalf("live = %+v", live)
	}
	// Within 30 ms: both made 40 ms ago, listed by id alone.
	if ids := s.Live("g", 30*time.Millisecond); len(ids) != 2 || ids[0].Hashes != nil || ids[1].Hashes != nil {
		t.Fatalf("live within 30 ms = %+v", ids)
	}
	// Re-applied elsewhere as a full state, it gives the same matches.
	o, _ := newStore(0)
	apply(t, o, provisional.Push{PickerID: "g", Sequence: 2, Full: true, Picks: live})
	if got := matches(o, chain(1, 2)); got["r1"] != 2 {
		t.Fatalf("full state elsewhere: %v", got)
	}
}

// Readers run against writers (go test -race).
func TestConcurrentReadersAndWriters(t *testing.T) {
	s, _ := newStore(0)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				id := uint64(w*1000 + i)
				_, _ = s.Apply(provisional.Push{PickerID: "g", Sequence: id + 1, Picks: []provisional.Pick{pick(id, "r", 1, 4)}})
				_, _ = s.Apply(provisional.Push{PickerID: "g", Sequence: id + 1, Removed: []uint64{id}})
				s.Confirm(part, "r", chain(1, 2))
				_ = s.At().Matches(nil, part, chain(1, 4))
			}
		}(w)
	}
	wg.Wait()
	if st := s.Stats(); st.Blocks != 0 || st.Picks != 0 {
		t.Fatalf("stats %+v, want empty", st)
	}
}

// What a push carries besides its picks is held after them: the callback
// already reads the push's picks; a push refused as invalid calls nothing,
// one refused for a full store still calls it.
func TestApplyThen_AfterThePicks(t *testing.T) {
	s, _ := newStore(4)
	var seen map[string]uint32
	_, err := s.ApplyThen(provisional.Push{PickerID: "gw", Sequence: 1, Picks: []provisional.Pick{pick(1, "r1", 100, 2)}},
		func() { seen = matches(s, chain(100, 2)) })
	if err != nil || seen["r1"] != 2 {
		t.Fatalf("err %v; the callback saw %v, want r1's 2 blocks already held", err, seen)
	}
	called := false
	if _, err := s.ApplyThen(provisional.Push{Sequence: 2}, func() { called = true }); !errors.Is(err, provisional.ErrInvalid) || called {
		t.Fatalf("a push without a picker id: err %v, callback called %v; want ErrInvalid and no call", err, called)
	}
	if _, err := s.ApplyThen(provisional.Push{PickerID: "gw", Sequence: 3, Picks: []provisional.Pick{pick(2, "r2", 200, 3)}}, func() { called = true }); !errors.Is(err, provisional.ErrFull) || !called {
		t.Fatalf("a push over the store's 4 blocks: err %v, callback called %v; want ErrFull and the call", err, called)
	}
}
