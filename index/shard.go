package index

import (
	"math/bits"
	"sync"
)

// Storage layout. Blocks are spread over numShards shards by a mix of
// (partition id, block hash). Each shard owns flat slices only: an
// open-addressing table of uint32 slot words, a slab of fixed-size block
// entries and a slab of packed residencies. No per-block or per-residency
// pointers exist, so the garbage collector has nothing to scan, a residency
// costs 8 bytes, and a scan is a walk over a few flat arrays.

const (
	// 4,096 shards (~90 KB at 10 M residencies): a scan (expiry, eviction,
	// CLEARED) holds one shard's lock for ~1/4,096 of the pass, and a
	// view's export read-locks one shard's blocks at a time.
	shardBits = 12
	numShards = 1 << shardBits

	// A slot word is tag<<24 | (block index + 1); 0 is an empty slot. The
	// 8-bit tag (from the key's mix) lets a probe reject most non-matching
	// slots without touching the block entry.
	slotIdxBits = 24
	slotIdxMask = 1<<slotIdxBits - 1
	// maxShardBlocks bounds the block entries of one shard (the slot
	// index width): 4,096 shards × 16.7 M blocks.
	maxShardBlocks = slotIdxMask - 1

	minTableSize = 64

	// A residency is packed as last_seen(44 bits, ms) << 20 | replica(20
	// bits). 2^44 ms reaches the year 2527; 2^20 interned replica ids.
	repBits     = 20
	repMask     = 1<<repBits - 1
	maxReplicas = repMask - 1
	maxSeenMs   = 1<<44 - 1

	// Residents of a block live in a power-of-two run of the residency
	// slab; class c holds up to 1<<c residents.
	numClasses  = 17
	maxResident = 1<<16 - 1 // resN is a uint16
)

// The replica field holds index+1 so a live residency word is never 0:
// scans of the slab can tell it from a free slot.
func packRes(rep uint32, seen int64) uint64 { return uint64(seen)<<repBits | uint64(rep+1) }
func resRep(r uint64) uint32                { return uint32(r&repMask) - 1 }
func resSeen(r uint64) int64                { return int64(r >> repBits) }

// clampSeen maps any int64 timestamp into the 44 bits a residency stores,
// so odd values from an old log can never corrupt the packing.
func clampSeen(ms int64) int64 {
	if ms < 0 {
		return 0
	}
	if ms > maxSeenMs {
		return maxSeenMs
	}
	return ms
}

// blockEnt is one block of one partition: 32 bytes. part == 0 marks a free
// entry (partition ids start at 1).
type blockEnt struct {
	hash   uint64
	part   uint32
	tokens uint32
	cum    uint32
	access uint32
	resOff uint32
	resN   uint16
	resCls uint8
}

// keyMix spreads (partition id, block hash) over shards and slots. Block
// hashes are usually XXH3 output, but tests and odd producers use small
// integers, so the key is always mixed.
func keyMix(part uint32, hash uint64) uint64 {
	return keyMixP(partMix(part), hash)
}

// partMix and keyMixP split keyMix so a lookup mixes its partition once.
func partMix(part uint32) uint64            { return fmix64(uint64(part) * 0x9e3779b97f4a7c15) }
func keyMixP(pm uint64, hash uint64) uint64 { return fmix64(hash ^ pm) }

func shardOf(m uint64) int { return int(m & (numShards - 1)) }

// A shard index must fit the uint16 of shardLocks.list (compile-time check).
const _ = uint16(numShards - 1)

// shard is a lock plus a pointer to its data. Readers hold mu.RLock while
// they read d; the writer holds mu.Lock while it mutates d in place (after
// saving the pre-image of what it changes for open views: undo.go).
type shard struct {
	mu sync.RWMutex
	d  *shardData
}

// shardData is the content of one shard. The fields a lookup reads (the
// three slab headers) come first, and the writer-only free lists live
// behind a pointer, so the 4,096 headers stay small (~150 B each, ~0.6 MB
// in all) and a lookup's header loads mostly hit the cache.
type shardData struct {
	table  []uint32
	blocks []blockEnt
	res    []uint64

	// disp[i] is how far table[i]'s entry sits from its home slot
	// (dispFar: at least that far, or unknown); 0 for an empty slot.
	// Writer only: a delete's backward shift reads it instead of loading
	// every following entry's block to find its home, one cache miss per
	// entry shifted.
	disp       []uint8
	freeBlocks []uint32
	free       *freeRuns
	// undo is the writer's undo state (undo.go), nil until the first view.
	undo *shardUndo
	// saves counts the pre-images ever saved from this shard (written
	// under the write lock, read by exports under the read lock: an
	// unchanged count means no block of the shard changed since).
	saves uint64

	nBlocks int
	nRes    int
	// digest is the wrapping sum of this shard's block and residency
	// contributions (see digest.go).
	digest uint64
}

// freeRuns holds the free residency runs of a shard, per size class.
type freeRuns [numClasses][]uint32

func newShardData() *shardData {
	return &shardData{table: make([]uint32, minTableSize), disp: make([]uint8, minTableSize), free: new(freeRuns)}
}

// find returns the block index of (part, hash), or -1 and the empty slot
// where it would go. m is keyMix(part, hash).
func (d *shardData) find(part uint32, hash, m uint64) (int, int) {
	return d.probeFrom(part, hash, m, m>>shardBits)
}

// findFrom is find continuing a probe run at slot i (the block index only).
func (d *shardData) findFrom(part uint32, hash, m, i uint64) int {
	bi, _ := d.probeFrom(part, hash, m, i)
	return bi
}

// candidate returns the index of the first block entry of m's probe run
// whose slot carries m's tag, from *slot (whose word e the caller already
// loaded) on, and leaves *slot at that slot; -1 when the run ends first,
// which proves the key absent. The entry itself is not read (the caller
// verifies it).
func (d *shardData) candidate(m uint64, slot *uint64, e uint32) int32 {
	mask := uint64(len(d.table) - 1)
	tag := uint32(m >> 56)
	i := *slot
	for e != 0 {
		if e>>slotIdxBits == tag {
			*slot = i
			return int32(e&slotIdxMask) - 1
		}
		i = (i + 1) & mask
		e = d.table[i]
	}
	*slot = i
	return -1
}

func (d *shardData) probeFrom(part uint32, hash, m, i uint64) (int, int) {
	mask := uint64(len(d.table) - 1)
	i &= mask
	tag := uint32(m >> 56)
	for {
		e := d.table[i]
		if e == 0 {
			return -1, int(i)
		}
		if e>>slotIdxBits == tag {
			bi := int(e&slotIdxMask) - 1
			b := &d.blocks[bi]
			if b.hash == hash && b.part == part {
				return bi, int(i)
			}
		}
		i = (i + 1) & mask
	}
}

// residents returns the residency words of block b (aliasing the slab).
func (d *shardData) residents(b *blockEnt) []uint64 {
	return d.res[b.resOff : b.resOff+uint32(b.resN)]
}

// insertBlock adds a block at the empty slot returned by find and returns
// its index, or -1 when the shard is full.
func (d *shardData) insertBlock(part uint32, hash, m uint64, slot int, tokens, cum uint32) int {
	if (d.nBlocks+1)*4 > len(d.table)*3 {
		d.grow()
		_, slot = d.find(part, hash, m)
	}
	var bi int
	if n := len(d.freeBlocks); n > 0 {
		bi = int(d.freeBlocks[n-1])
		d.pre(bi)
		d.freeBlocks = d.freeBlocks[:n-1]
	} else {
		if len(d.blocks) >= maxShardBlocks {
			return -1
		}
		bi = len(d.blocks)
		d.pre(bi)
		d.blocks = append(d.blocks, blockEnt{})
	}
	// Every live block owns a residency run from birth, so no entry needs
	// a "has no run yet" state.
	d.blocks[bi] = blockEnt{hash: hash, part: part, tokens: tokens, cum: cum, resOff: d.allocRun(0)}
	d.table[slot] = uint32(m>>56)<<slotIdxBits | uint32(bi+1)
	d.disp[slot] = dispOf(uint64(slot)-m>>shardBits, uint64(len(d.table)-1))
	d.nBlocks++
	return bi
}

// insertBlockN is insertBlock with a residency run sized for n residents
// (n ≥ 1, ≤ maxResident), which the caller fills and counts (resN, nRes):
// the snapshot builder knows each block's residents up front, so it skips
// the run moves of growing one resident at a time.
func (d *shardData) insertBlockN(part uint32, hash, m uint64, slot int, tokens, cum uint32, n int) int {
	bi := d.insertBlock(part, hash, m, slot, tokens, cum)
	if bi < 0 || n <= 1 {
		return bi
	}
	b := &d.blocks[bi]
	cls := uint8(bits.Len(uint(n - 1)))
	d.freeRun(b.resOff, b.resCls)
	b.resOff, b.resCls = d.allocRun(cls), cls
	return bi
}

// dispFar is the largest displacement disp records; an entry at least
// that far from home has its home computed from its block.
const dispFar = 255

// dispOf is disp's value for an entry delta = slot − home slots past its
// home (delta is taken modulo the table size, mask = size − 1).
func dispOf(delta, mask uint64) uint8 {
	return uint8(min(delta&mask, dispFar))
}

func (d *shardData) grow() {
	old := d.table
	d.table = make([]uint32, len(old)*2)
	d.disp = make([]uint8, len(old)*2)
	mask := uint64(len(d.table) - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		b := &d.blocks[(e&slotIdxMask)-1]
		home := (keyMix(b.part, b.hash) >> shardBits) & mask
		i := home
		for d.table[i] != 0 {
			i = (i + 1) & mask
		}
		d.table[i] = e
		d.disp[i] = dispOf(i-home, mask)
	}
}

// deleteBlock removes block bi (which must have no residents) from the
// table (backward-shift deletion keeps probe chains intact without
// tombstones) and frees its entry.
func (d *shardData) deleteBlock(bi int) {
	d.pre(bi)
	b := &d.blocks[bi]
	mask := uint64(len(d.table) - 1)
	m := keyMix(b.part, b.hash)
	i := (m >> shardBits) & mask
	for d.table[i]&slotIdxMask != uint32(bi+1) {
		i = (i + 1) & mask
	}
	// Backward shift: pull later entries of the probe run into the hole
	// when their home slot allows it. An entry's home comes from disp,
	// so the shift reads no block entries (only one dispFar or more
	// from home loads its block).
	j := i
	for {
		d.table[i], d.disp[i] = 0, 0
		for {
			j = (j + 1) & mask
			e := d.table[j]
			if e == 0 {
				goto done
			}
			var k uint64
			if dj := d.disp[j]; dj < dispFar {
				k = (j - uint64(dj)) & mask
			} else {
				ob := &d.blocks[(e&slotIdxMask)-1]
				k = (keyMix(ob.part, ob.hash) >> shardBits) & mask
			}
			// Move e into hole i unless its home k lies cyclically in (i, j].
			if (j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j)) {
				d.table[i] = e
				d.disp[i] = dispOf(i-k, mask)
				i = j
				break
			}
		}
	}
done:
	d.freeRun(b.resOff, b.resCls)
	*b = blockEnt{}
	d.freeBlocks = append(d.freeBlocks, uint32(bi))
	d.nBlocks--
}

// allocRun returns the offset of a free run of 1<<cls residency words.
func (d *shardData) allocRun(cls uint8) uint32 {
	fl := d.free[cls]
	if n := len(fl); n > 0 {
		off := fl[n-1]
		d.free[cls] = fl[:n-1]
		return off
	}
	off := uint32(len(d.res))
	d.res = append(d.res, make([]uint64, 1<<cls)...) // no allocation: append of a make is optimized
	return off
}

func (d *shardData) freeRun(off uint32, cls uint8) {
	d.free[cls] = append(d.free[cls], off)
}

// addResident appends residency r to block bi, moving its run to the next
// class when full. It reports false when the block already holds
// maxResident residents.
func (d *shardData) addResident(bi int, r uint64) bool {
	b := &d.blocks[bi]
	if int(b.resN) >= maxResident {
		return false
	}
	d.pre(bi)
	if int(b.resN) == 1<<b.resCls {
		nc := b.resCls + 1
		off := d.allocRun(nc) // may reallocate d.res; b stays valid (blocks slab)
		old := d.res[b.resOff : b.resOff+uint32(b.resN)]
		copy(d.res[off:off+uint32(b.resN)], old)
		clear(old) // free runs hold only zeros (see holds)
		d.freeRun(b.resOff, b.resCls)
		b.resOff, b.resCls = off, nc
	}
	d.res[b.resOff+uint32(b.resN)] = r
	b.resN++
	d.nRes++
	return true
}

// removeResidentAt removes resident i of block bi (order is not kept: the
// index never depends on resident order).
func (d *shardData) removeResidentAt(bi, i int) {
	d.pre(bi)
	b := &d.blocks[bi]
	rs := d.residents(b)
	last := len(rs) - 1
	rs[i] = rs[last]
	rs[last] = 0
	b.resN--
	d.nRes--
}
