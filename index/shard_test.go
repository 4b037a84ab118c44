package index

import (
	"math/rand/v2"
	"testing"
)

// checkTable fails unless every key of d is found, no removed key is,
// and every slot's disp is what its entry's home slot says: the distance
// from home capped at dispFar, and 0 for an empty slot.
func checkTable(t *testing.T, d *shardData, part uint32, live, gone map[uint64]bool) {
	t.Helper()
	mask := uint64(len(d.table) - 1)
	if len(d.disp) != len(d.table) {
		t.Fatalf("disp has %d slots, table %d", len(d.disp), len(d.table))
	}
	far := 0
	for i, e := range d.table {
		if e == 0 {
			if d.disp[i] != 0 {
				t.Fatalf("empty slot %d has disp %d", i, d.disp[i])
			}
			continue
		}
		b := &d.blocks[(e&slotIdxMask)-1]
		dist := (uint64(i) - keyMix(b.part, b.hash)>>shardBits) & mask
		want := uint8(min(dist, dispFar))
		if d.disp[i] != want {
			t.Fatalf("slot %d: disp %d, entry is %d from home (want %d)", i, d.disp[i], dist, want)
		}
		if want == dispFar {
			far++
		}
	}
	for h := range live {
		if bi, _ := d.find(part, h, keyMix(part, h)); bi < 0 {
			t.Fatalf("block %x not found", h)
		}
	}
	for h := range gone {
		if bi, _ := d.find(part, h, keyMix(part, h)); bi >= 0 {
			t.Fatalf("removed block %x found at %d", h, bi)
		}
	}
	if d.nBlocks != len(live) {
		t.Fatalf("nBlocks %d, want %d", d.nBlocks, len(live))
	}
}

// TestShardTable_DeleteKeepsProbeRunsAndDisp inserts and deletes blocks
// in one shard's table, including a pile-up whose entries sit more than
// dispFar slots from home (their home must then come from the block), and
// checks after each phase that every live block is found, no deleted one
// is, and disp matches each entry's real home.
func TestShardTable_DeleteKeepsProbeRunsAndDisp(t *testing.T) {
	const part = 7
	for _, tc := range []struct {
		name string
		keep func(m uint64) bool // which hashes the test uses
		n    int
		// farSlot: a slot of the final 1,024-slot table that must hold
		// an entry dispFar or more from home (0: none required).
		farSlot uint64
	}{
		// Every home in slots 0–7 for every table size up to 1,024: one
		// run of all n entries, most of them dispFar or more from home.
		{"pile-up", func(m uint64) bool { return (m>>shardBits)&1023 < 8 }, 600, 8 + dispFar + 10},
		// Every home in the last 8 slots: the run wraps past slot 0.
		{"wrap", func(m uint64) bool { return (m>>shardBits)&1023 >= 1016 }, 600, (1016 + dispFar + 10) & 1023},
		{"uniform", func(uint64) bool { return true }, 5000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			d := newShardData()
			var keys []uint64
			for len(keys) < tc.n {
				h := rng.Uint64()
				if tc.keep(keyMix(part, h)) {
					keys = append(keys, h)
				}
			}
			live, gone := map[uint64]bool{}, map[uint64]bool{}
			for _, h := range keys {
				m := keyMix(part, h)
				bi, slot := d.find(part, h, m)
				if bi >= 0 {
					t.Fatalf("block %x present before insert", h)
				}
				if d.insertBlock(part, h, m, slot, 16, 16) < 0 {
					t.Fatal("shard full")
				}
				live[h] = true
			}
			checkTable(t, d, part, live, gone)
			if tc.farSlot != 0 && (len(d.table) != 1024 || d.disp[tc.farSlot] != dispFar) {
				t.Fatalf("table of %d slots, disp[%d] = %d: the far path is untested", len(d.table), tc.farSlot, d.disp[tc.farSlot])
			}
			// Delete a random half, then re-insert some of it, twice.
			for round := 0; round < 2; round++ {
				rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
				for _, h := range keys[:len(keys)/2] {
					if !live[h] {
						continue
					}
					bi, _ := d.find(part, h, keyMix(part, h))
					d.deleteBlock(bi)
					delete(live, h)
					gone[h] = true
				}
				checkTable(t, d, part, live, gone)
				for _, h := range keys[:len(keys)/4] {
					if live[h] {
						continue
					}
					m := keyMix(part, h)
					_, slot := d.find(part, h, m)
					d.insertBlock(part, h, m, slot, 16, 16)
					live[h] = true
					delete(gone, h)
				}
				checkTable(t, d, part, live, gone)
			}
		})
	}
}
