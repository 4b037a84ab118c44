package provisional_test

import (
	"testing"

	"github.com/inference-cache/inference-cache/provisional"
)

// A pick of a 4,000-token prompt (250 blocks) added and removed, with
// 1,000 other picks held.
func BenchmarkApplyAddRemove(b *testing.B) {
	s, _ := newStore(0)
	for i := range 1000 {
		apply(&testing.T{}, s, provisional.Push{PickerID: "g", Sequence: uint64(i + 1), Picks: []provisional.Pick{pick(uint64(i+1), "r1", uint64(1_000_000*(i+1)), 250)}})
	}
	k := pick(0, "r2", 7, 250)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k.ID = uint64(10_000 + i)
		seq := uint64(10_000 + 2*i)
		if _, err := s.Apply(provisional.Push{PickerID: "h", Sequence: seq, Picks: []provisional.Pick{k}}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Apply(provisional.Push{PickerID: "h", Sequence: seq + 1, Removed: []uint64{k.ID}}); err != nil {
			b.Fatal(err)
		}
	}
}

// A lookup's chain of 250 blocks matched against 1,000 held picks of
// 250 blocks: hit (8 picks share the chain's prefix, on 8 replicas) and
// miss.
func BenchmarkMatches(b *testing.B) {
	s, _ := newStore(0)
	for i := range 1000 {
		apply(&testing.T{}, s, provisional.Push{PickerID: "g", Sequence: uint64(i + 1), Picks: []provisional.Pick{pick(uint64(i+1), "r1", uint64(1_000_000*(i+1)), 250)}})
	}
	for i := range 8 {
		apply(&testing.T{}, s, provisional.Push{PickerID: "g", Sequence: uint64(2000 + i), Picks: []provisional.Pick{pick(uint64(2000+i), string(rune('a'+i)), 7, 250-i)}})
	}
	for _, c := range []struct {
		name  string
		chain []uint64
	}{{"hit", chain(7, 250)}, {"miss", chain(999_999_999, 250)}} {
		b.Run(c.name, func(b *testing.B) {
			var buf [8]provisional.Match
			b.ReportAllocs()
			for range b.N {
				_ = s.At().Matches(buf[:0], part, c.chain)
			}
		})
	}
}
