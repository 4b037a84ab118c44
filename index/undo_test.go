package index

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/policy"
)

// Tests of the views' undo logs (undo.go): a view must export exactly the
// state of the index at View() whatever the writer does after, with
// several views open and released in any order, and the pre-images must be
// freed once no open view needs them.

// viewState is everything a view exports.
type viewState struct {
	blocks []string
	stats  []string
	digest uint64
	sizes  Sizes
	pol    policy.Policy
}

func (a viewState) diff(b viewState) string {
	if len(a.blocks) != len(b.blocks) {
		return fmt.Sprintf("%d blocks, want %d", len(a.blocks), len(b.blocks))
	}
	for i := range a.blocks {
		if a.blocks[i] != b.blocks[i] {
			return fmt.Sprintf("block record %d:\n got %s\nwant %s", i, a.blocks[i], b.blocks[i])
		}
	}
	if !slices.Equal(a.stats, b.stats) {
		return fmt.Sprintf("stats:\n got %v\nwant %v", a.stats, b.stats)
	}
	if a.digest != b.digest || a.sizes != b.sizes {
		return fmt.Sprintf("digest/sizes %x %+v, want %x %+v", a.digest, a.sizes, b.digest, b.sizes)
	}
	if policyDigest(&a.pol) != policyDigest(&b.pol) {
		return "policy differs"
	}
	return ""
}

// captureState records the index's state directly from its data
// structures (not through a View): the reference a view taken at the same
// moment must export, however the index changes after.
func captureState(ix *Index) viewState {
	type rec struct {
		p Partition
		h uint64
		s string
	}
	var recs []rec
	for si := range ix.shards {
		d := ix.shards[si].d
		for bi := range d.blocks {
			b := d.blocks[bi]
			if b.part == 0 {
				continue
			}
			var rs []Residency
			for _, w := range d.residents(&b) {
				rs = append(rs, Residency{ReplicaID: ix.m.reps.ids[resRep(w)], LastSeenMs: resSeen(w)})
			}
			slices.SortFunc(rs, func(a, b Residency) int { return cmp.Compare(a.ReplicaID, b.ReplicaID) })
			p := ix.m.partsByID[b.part].p
			r := BlockRecord{Partition: p, Hash: b.hash, Tokens: b.tokens, CumTokens: b.cum, Access: uint64(b.access), Residents: rs}
			recs = append(recs, rec{p, b.hash, fmt.Sprint(r)})
		}
	}
	slices.SortFunc(recs, func(a, b rec) int {
		if c := comparePartition(&a.p, &b.p); c != 0 {
			return c
		}
		return cmp.Compare(a.h, b.h)
	})
	st := viewState{digest: ix.Digest(), sizes: ix.Sizes(), pol: ix.Policy()}
	for _, r := range recs {
		st.blocks = append(st.blocks, r.s)
	}
	var ss []string
	for _, r := range ix.m.stats {
		ss = append(ss, fmt.Sprint(r.s))
	}
	slices.Sort(ss)
	st.stats = ss
	return st
}

// exportView exports v through its public API, calling during(i) from
// the callback of record i (so the writer can change the index in the
// middle of an export), and checks that the records rebuild an index with
// the view's digest and sizes.
func exportView(t *testing.T, v *View, during func(i int)) viewState {
	t.Helper()
	return exportViewB(t, v, during, true)
}

// exportViewB is exportView, rebuilding only when build is set.
func exportViewB(t *testing.T, v *View, during func(i int), build bool) viewState {
	t.Helper()
	st := viewState{digest: v.Digest(), sizes: v.Sizes(), pol: v.Policy()}
	var b *Builder
	if build {
		b = NewBuilder(v.Policy())
	}
	i := 0
	if err := v.Blocks(func(r BlockRecord) error {
		st.blocks = append(st.blocks, fmt.Sprint(r))
		if b != nil {
			if err := b.AddBlock(r); err != nil {
				return err
			}
		}
		if during != nil {
			during(i)
		}
		i++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := v.Stats(func(s ReplicaStats) error {
		st.stats = append(st.stats, fmt.Sprint(s))
		if b == nil {
			return nil
		}
		return b.AddStats(s)
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(st.stats)
	if b == nil {
		return st
	}
	if got := b.Build(); got.Digest() != v.Digest() || got.Sizes() != v.Sizes() {
		t.Fatalf("rebuilt from the export: digest %x sizes %+v, view %x %+v", got.Digest(), got.Sizes(), v.Digest(), v.Sizes())
	}
	return st
}

// checkNoUndo fails unless, with every view released (and a writer call
// since), no undo log is left or referenced.
func checkNoUndo(t *testing.T, ix *Index) {
	t.Helper()
	if n := ix.undoBytes(); n != 0 {
		t.Fatalf("%d bytes of undo log left after every view was released", n)
	}
	if len(ix.views.logs) != 0 || ix.views.log != nil || ix.views.newest.Load() != nil {
		t.Fatalf("%d undo logs kept with no view open", len(ix.views.logs))
	}
	for si := range ix.shards {
		if u := ix.shards[si].d.undo; u != nil && u.log != nil {
			t.Fatalf("shard %d still points at an undo log", si)
		}
	}
}

// Table of single writes after a view: each must leave the view's export
// as it was, with two overlapping views released in both orders.
func TestView_UndoCases(t *testing.T) {
	lfu := testPolicy()
	lfu.EvictionPolicy = policy.LFU
	base := func(ix *Index) {
		ix.ApplyEvents([]BlockEvent{
			stored("a", vllm, t0, 1, 2, 3),
			stored("b", vllm, t0+1, 1, 2),
			stored("c", Partition{"sglang", "m", "t", ""}, t0, 7),
		})
		ix.ApplyStats([]ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0}})
	}
	cases := []struct {
		name  string
		write func(ix *Index)
	}{
		{"RefreshLastSeen", func(ix *Index) { ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0+5, 1, 2, 3)}) }},
		{"NewTokenCounts", func(ix *Index) {
			ev := stored("a", vllm, t0, 1, 2)
			ev.BlockTokenCounts = []uint32{32, 32}
			ix.ApplyEvents([]BlockEvent{ev})
		}},
		{"NewResidentMovesRun", func(ix *Index) {
			for i := range 20 {
				ix.ApplyEvents([]BlockEvent{stored(fmt.Sprintf("n%d", i), vllm, t0, 1)})
			}
		}},
		{"NewBlockAndPartition", func(ix *Index) {
			ix.ApplyEvents([]BlockEvent{stored("z", Partition{"new", "m", "t", ""}, t0, 99), stored("a", vllm, t0, 4)})
		}},
		{"RemoveDeletesBlock", func(ix *Index) {
			ix.ApplyEvents([]BlockEvent{{Kind: Removed, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{3, 1}}})
		}},
		{"DeleteThenReuseEntry", func(ix *Index) {
			ix.ApplyEvents([]BlockEvent{{Kind: Removed, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{3}}})
			for h := uint64(100); h < 3000; h++ { // some land in block 3's shard and take its entry
				ix.ApplyEvents([]BlockEvent{stored("d", vllm, t0, h)})
			}
		}},
		{"Cleared", func(ix *Index) { ix.ApplyEvents([]BlockEvent{{Kind: Cleared, ReplicaID: "a"}}) }},
		{"ClearedEverything", func(ix *Index) {
			ix.ApplyEvents([]BlockEvent{{Kind: Cleared, ReplicaID: "a"}, {Kind: Cleared, ReplicaID: "b"}, {Kind: Cleared, ReplicaID: "c"}})
		}},
		{"Expire", func(ix *Index) { ix.Expire(t0 + 1000_000 + 1) }},
		{"Evict", func(ix *Index) {
			p := ix.Policy()
			p.MaxResidencies = 2
			ix.SetPolicy(p)
		}},
		{"Credit", func(ix *Index) { ix.Credit(vllm, []uint64{1, 2, 3}) }},
		{"Stats", func(ix *Index) {
			ix.ApplyStats([]ReplicaStats{{ReplicaID: "a", ModelID: "m2", HashSchemes: []string{"x"}, ObservedAtMs: t0 + 9}, {ReplicaID: "q", ModelID: "m", ObservedAtMs: t0}})
		}},
		{"Policy", func(ix *Index) {
			p := ix.Policy()
			p.MinimumMatchedTokens = 77
			ix.SetPolicy(p)
		}},
	}
	for _, c := range cases {
		for _, order := range []string{"OldestFirst", "NewestFirst"} {
			t.Run(c.name+"/"+order, func(t *testing.T) {
				ix := New(lfu)
				base(ix)
				w1 := captureState(ix)
				v1 := ix.View()
				c.write(ix)
				w2 := captureState(ix)
				v2 := ix.View()
				c.write(ix)
				ix.ApplyEvents([]BlockEvent{stored("late", vllm, t0+50, 1, 2, 3, 4, 5)})
				first, second := v1, v2
				if order == "NewestFirst" {
					first, second = v2, v1
				}
				for _, x := range []struct {
					v    *View
					want viewState
				}{{v1, w1}, {v2, w2}} {
					if d := exportView(t, x.v, nil).diff(x.want); d != "" {
						t.Fatalf("view %d: %s", x.v.epoch, d)
					}
				}
				first.Release()
				c.write(ix)
				if d := exportView(t, second, nil).diff(map[*View]viewState{v1: w1, v2: w2}[second]); d != "" {
					t.Fatalf("after releasing the other view: %s", d)
				}
				second.Release()
				ix.ApplyEvents(nil)
				checkNoUndo(t, ix)
			})
		}
	}
}

// The first write after View saves pre-images of the blocks it changes,
// not the shards they live in: the undo log it leaves is proportional to
// the blocks touched.
func TestView_FirstWriteCostsTheBlocksItTouches(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents(manyShardEvents(5, 40_000, t0)) // 80 k blocks over all shards
	v := ix.View()
	defer v.Release()
	evs := manyShardEvents(5, 40_000, t0+1)[:64] // refresh 128 existing blocks
	ix.ApplyEvents(evs)
	// One pre-image per block changed (128 blocks, refreshed), whatever
	// the size of the shards they live in.
	if n := ix.undoEntries(); n == 0 || n > 128 {
		t.Fatalf("undo log after 128 block updates: %d pre-images", n)
	}
	if n := ix.undoBytes(); n > 128<<10 {
		t.Fatalf("undo log after 128 block updates: %d bytes", n)
	}
}

// Exports, lookups and the writer run concurrently (under -race): every
// export equals the state captured when its view was taken.
func TestView_ConcurrentExportsAndWriter(t *testing.T) {
	g := newPropGen(99)
	for range 2000 {
		g.ix.ApplyEvents([]BlockEvent{g.event()})
	}
	type job struct {
		v    *View
		want viewState
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				st := viewState{digest: j.v.Digest(), sizes: j.v.Sizes(), pol: j.v.Policy()}
				err := j.v.Blocks(func(r BlockRecord) error { st.blocks = append(st.blocks, fmt.Sprint(r)); return nil })
				_ = j.v.Stats(func(s ReplicaStats) error { st.stats = append(st.stats, fmt.Sprint(s)); return nil })
				slices.Sort(st.stats)
				j.v.Release()
				if d := st.diff(j.want); err != nil || d != "" {
					mu.Lock()
					fails = append(fails, fmt.Sprint(err, d))
					mu.Unlock()
				}
			}
		}()
	}
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // a reader
		defer wg.Done()
		var r Result
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			g2 := g.pool[i%len(g.pool)]
			g.ix.Lookup(&LookupRequest{Partition: vllm, BlockHashes: []uint64{g2}, NowMs: t0}, &r)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 40 && time.Now().Before(deadline); i++ {
		want := captureState(g.ix)
		jobs <- job{g.ix.View(), want}
		for range 50 {
			g.mutate()
		}
	}
	close(jobs)
	close(stop)
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%d exports differ; first: %s", len(fails), fails[0])
	}
	g.ix.ApplyEvents(nil)
	checkNoUndo(t, g.ix)
}
