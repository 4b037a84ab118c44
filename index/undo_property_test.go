package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/inference-cache/inference-cache/policy"
)

// propGen drives random operations on an index. Block hashes come from a
// small pool so blocks are refreshed, removed, deleted and their entries
// reused, and residency runs grow and move.
type propGen struct {
	rng   *rand.Rand
	ix    *Index
	pol   policy.Policy
	parts []Partition
	reps  []string
	pool  []uint64
	now   int64
}

func newPropGen(seed uint64) *propGen {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	p := testPolicy()
	if rng.IntN(2) == 0 {
		p.EvictionPolicy = policy.LFU
	}
	g := &propGen{
		rng:   rng,
		ix:    New(p),
		pol:   p,
		parts: []Partition{vllm, {"vllm", "m", "t2", ""}, {"sglang", "m", "t", "lora"}, {"vllm", "m2", "t", ""}},
		now:   t0,
	}
	for i := range 3 + rng.IntN(6) {
		g.reps = append(g.reps, fmt.Sprintf("r%d", i))
	}
	for range 50 + rng.IntN(1500) {
		g.pool = append(g.pool, rng.Uint64())
	}
	return g
}

// hashes picks 1–6 blocks, half of them from a hot tenth of the pool so
// the same residencies are refreshed and removed again and again.
func (g *propGen) hashes() []uint64 {
	hs := make([]uint64, 1+g.rng.IntN(6))
	for i := range hs {
		n := len(g.pool)
		if g.rng.IntN(2) == 0 {
			n = max(1, n/10)
		}
		hs[i] = g.pool[g.rng.IntN(n)]
	}
	return hs
}

func (g *propGen) event() BlockEvent {
	rep, p := g.reps[g.rng.IntN(len(g.reps))], g.parts[g.rng.IntN(len(g.parts))]
	switch k := g.rng.IntN(20); {
	case k < 13:
		hs := g.hashes()
		ev := stored(rep, p, g.now-int64(g.rng.IntN(1_500_000)), hs...)
		for i := range ev.BlockTokenCounts {
			ev.BlockTokenCounts[i] = uint32(16 * (1 + g.rng.IntN(2))) // counts change: token updates
		}
		ev.PrefixTokensBefore = uint32(16 * g.rng.IntN(2))
		return ev
	case k < 19:
		return BlockEvent{Kind: Removed, ReplicaID: rep, Partition: p, BlockHashes: g.hashes()}
	default:
		return BlockEvent{Kind: Cleared, ReplicaID: rep}
	}
}

// mutate applies one random write (no view operations).
func (g *propGen) mutate() {
	ix := g.ix
	g.now += int64(g.rng.IntN(60_000))
	switch k := g.rng.IntN(100); {
	case k < 70:
		evs := make([]BlockEvent, 1+g.rng.IntN(4))
		for i := range evs {
			evs[i] = g.event()
		}
		ix.ApplyEvents(evs)
	case k < 80:
		s := ReplicaStats{
			ReplicaID: g.reps[g.rng.IntN(len(g.reps))], ModelID: "m", HashSchemes: []string{"vllm"},
			Pressure: g.rng.Float64(), TenantHitRate: map[string]float64{"t": g.rng.Float64()}, ObservedAtMs: g.now,
		}
		ix.ApplyStats([]ReplicaStats{s})
	case k < 90:
		ix.Credit(g.parts[g.rng.IntN(len(g.parts))], g.hashes())
	case k < 95:
		ix.Expire(g.now)
	default:
		// Evict down to a bound, then lift it again.
		p := g.pol
		p.MaxResidencies = uint64(ix.Sizes().Residencies*3/4 + 1)
		ix.SetPolicy(p)
		ix.SetPolicy(g.pol)
	}
}

type openView struct {
	v    *View
	want viewState
}

// TestView_PropertyUndoLog: random operation sequences with views taken at
// random points (up to three open at once, released in random order);
// every view's export, checked at random moments and while the writer
// changes the index in the middle of the export, equals the state captured
// directly from the index when the view was taken.
func TestView_PropertyUndoLog(t *testing.T) {
	seeds, steps := 32, 400
	if raceEnabled || testing.Short() {
		seeds, steps = 8, 300
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			g := newPropGen(seed)
			var open []openView
			take := func() {
				if len(open) < 3 {
					want := captureState(g.ix)
					open = append(open, openView{g.ix.View(), want})
				}
			}
			checks := 0
			check := func(ov openView, during func(int)) {
				t.Helper()
				// Rebuilding from every export is the slow part under
				// -race: every fourth one is enough to tie exports to
				// digests.
				checks++
				if d := exportViewB(t, ov.v, during, checks%4 == 1).diff(ov.want); d != "" {
					t.Fatalf("view export differs from the state at View(): %s", d)
				}
			}
			for step := range steps {
				switch k := g.rng.IntN(100); {
				case k < 80:
					g.mutate()
				case k < 88:
					take()
				case k < 94:
					if len(open) > 0 {
						i := g.rng.IntN(len(open))
						if g.rng.IntN(2) == 0 {
							check(open[i], nil)
						}
						open[i].v.Release()
						open = slices.Delete(open, i, i+1)
					}
				default:
					if len(open) == 0 {
						continue
					}
					// Export one view while the writer keeps changing the
					// index (and takes or releases other views) between
					// records.
					i := g.rng.IntN(len(open))
					cur := open[i]
					every := 1 + g.rng.IntN(20)
					check(cur, func(r int) {
						if r%every != 0 {
							return
						}
						switch g.rng.IntN(10) {
						case 0:
							take()
						case 1:
							for j := range open {
								if open[j].v != cur.v {
									open[j].v.Release()
									open = slices.Delete(open, j, j+1)
									break
								}
							}
						default:
							g.mutate()
						}
					})
				}
				_ = step
				// Logs older than the oldest open view are dropped at the
				// writer's next call.
				g.ix.reclaimViews()
				oldest := uint64(0)
				for _, ov := range open {
					if oldest == 0 || ov.v.epoch < oldest {
						oldest = ov.v.epoch
					}
				}
				for _, lg := range g.ix.views.logs {
					if oldest == 0 || lg.epoch < oldest {
						t.Fatalf("step %d: undo log of epoch %d kept, oldest open view %d", step, lg.epoch, oldest)
					}
				}
			}
			for _, ov := range open {
				check(ov, nil)
			}
			for _, i := range g.rng.Perm(len(open)) {
				open[i].v.Release()
			}
			g.ix.ApplyEvents(nil) // the writer reclaims at its next call
			if n := g.ix.undoBytes(); n != 0 {
				t.Fatalf("%d bytes of undo log left after every view was released", n)
			}
			checkNoUndo(t, g.ix)
		})
	}
}
