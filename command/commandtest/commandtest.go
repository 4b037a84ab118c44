// Package commandtest holds test support shared by the packages that
// encode and apply log commands (command, fsm).
package commandtest

import (
	"math"
	"math/rand/v2"
	"strings"

	"github.com/inference-cache/inference-cache/index"
)

// RandomEvents draws block events over the whole value range of every field,
// zero values included (proto3 omits those, so they exercise every
// "field absent" branch).
func RandomEvents(rng *rand.Rand) []index.BlockEvent {
	strs := []string{"", "r", "replica-7", "xxh3-64", "Qwen/Qwen3-8B", "tenant-ü", "lora:a/b", strings.Repeat("z", 200)}
	u64 := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint64(rng.IntN(300))
		case 2:
			return math.MaxUint64 - uint64(rng.IntN(3))
		}
		return rng.Uint64()
	}
	evs := make([]index.BlockEvent, rng.IntN(6))
	for i := range evs {
		e := &evs[i]
		e.Kind = index.EventKind(rng.IntN(4))
		e.ReplicaID = strs[rng.IntN(len(strs))]
		e.Partition = index.Partition{Scheme: strs[rng.IntN(len(strs))], Model: strs[rng.IntN(len(strs))],
			Tenant: strs[rng.IntN(len(strs))], Adapter: strs[rng.IntN(len(strs))]}
		for range rng.IntN(5) {
			e.BlockHashes = append(e.BlockHashes, u64())
		}
		for range rng.IntN(5) {
			e.BlockTokenCounts = append(e.BlockTokenCounts, uint32(u64()))
		}
		e.PrefixTokensBefore = uint32(u64())
		switch rng.IntN(3) {
		case 1:
			e.ObservedAtMs = int64(u64())
		case 2:
			e.ObservedAtMs = -int64(rng.IntN(1000)) - 1
		}
	}
	return evs
}
