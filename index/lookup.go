package index

import (
	"math/bits"
	"slices"
	"strings"

	"github.com/inference-cache/inference-cache/fingerprint"
)

// Detail strings. They are constants: they say which rule decided the
// answer and never echo request or other tenants' data.
const (
	detailBadBlockSize   = "policy block size for this model is invalid"
	detailMatch          = "prefix held warm by the listed replicas"
	detailColdStart      = "index is empty (cold start)"
	detailUnknownScheme  = "hash_scheme not seen in the index: check the gateway's scheme tag"
	detailUnknownModel   = "model_id not seen for this hash_scheme: check the gateway's model id"
	detailUnknownTenant  = "tenant_id not seen for this hash_scheme and model: check the gateway's tenant id"
	detailUnknownAdapter = "adapter_id not seen for this tenant: check the gateway's adapter id"
	detailTenantHot      = "no usable prefix match: replicas warm for this tenant"
	detailAffinity       = "no usable prefix match: stable affinity replica"
	detailNoMatch        = "no replica holds this prefix"
	detailBelowMinTokens = "matched runs shorter than minimumMatchedTokens"
	detailBelowFloor     = "top score below routingFloorScore"
	detailNoServing      = "no usable prefix match and no serving replica for this scheme and model"
	detailPanic          = "internal error in lookup: failing open"
)

// cand is one replica's run during chain matching.
type cand struct {
	rep     uint32
	depth   uint32 // matched blocks
	tokens  uint64 // matched tokens
	minSeen int64  // weakest link: oldest last_seen on the run
	mad     uint32 // matching_at_depth: replicas whose run reaches depth
	alive   bool
}

// Lookup answers req into res (reset first). Safe concurrently with the
// writer; it never panics (a recover turns an internal fault into NO_HINT)
// and, with a reused res, does not allocate.
func (ix *Index) Lookup(req *LookupRequest, res *Result) {
	res.Reset()
	defer func() {
		if r := recover(); r != nil {
			res.Reset()
			res.Reason, res.Detail = NoHint, detailPanic
		}
	}()
	ps := ix.pol.Load()
	if req.IncludeLoad {
		// Whatever the key: a prompt too short for a block still needs
		// the replicas' queue to be placed well.
		defer ix.loads(ps, req, res)
	}
	if req.Explain {
		res.RankingVersion = ps.p.RankingVersion
	}
	p := &req.Partition
	if d := CheckScheme(p.Scheme); d != "" {
		res.Detail = d
		return
	}

	// Key resolution (contract §5.1): caller's chain and/or prefix hash first,
	// else token ids fingerprinted with the model's block size.
	chain, counts := req.BlockHashes, req.BlockTokenCounts
	uniform := ps.p.BlockSizeFor(p.Model)
	if len(chain) == 0 && !req.HasPrefixHash && len(req.TokenIDs) > 0 {
		var err error
		res.keyBuf, err = fingerprint.AppendSaltedBlockHashes(res.keyBuf[:0], req.TokenIDs, int(uniform), req.CacheSalt)
		if err != nil {
			res.Detail = detailBadBlockSize
			return
		}
		chain, counts = res.keyBuf, nil
	}
	if d := CheckCounts(chain, counts); d != "" {
		res.Detail = d
		return
	}
	res.Chain = chain
	prefix, hasPrefix := req.PrefixHash, req.HasPrefixHash
	if !hasPrefix && len(chain) > 0 {
		prefix, hasPrefix = chain[len(chain)-1], true
	}
	if !hasPrefix {
		res.Detail = DetailNoKey
		if len(req.TokenIDs) > 0 {
			res.Detail = DetailTooFewTokens
		}
		return
	}

	ix.metaMu.RLock()
	defer ix.metaMu.RUnlock()
	m := ix.m
	why := detailNoMatch
	if pe := m.parts[*p]; pe != nil {
		var n int
		if ps.p.ChainMatching && len(chain) > 0 {
			n = ix.matchChain(pe, chain, counts, uniform, res)
		} else {
			n = ix.matchExact(pe, prefix, chain, res)
		}
		if n > 0 {
			if why = ix.rank(ps, pe, req, res); res.Reason == PrefixMatch {
				if ps.lfu {
					res.CreditPartition = *p
					if ps.p.ChainMatching && len(chain) > 0 {
						res.CreditHashes = append(res.CreditHashes, chain[:res.Hints[0].MatchedBlocks]...)
					} else {
						res.CreditHashes = append(res.CreditHashes, prefix)
					}
				}
				return
			}
		}
	}
	ix.fallback(ps, req, prefix, why, res)
}

func clampTokens(t uint64) uint32 {
	if t > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(t)
}

// matchChain walks the chain with leading-run semantics: the candidates
// are the holders of block 0, and a candidate missing from a block drops
// out for good. Returns the number of candidates.
//
// The chain is resolved walkBatch blocks at a time, in passes with no data
// dependency between the blocks of a pass, so the CPU overlaps their cache
// misses (memory-level parallelism) instead of paying table slot → block
// entry → residency run one block after another:
//
//  1. read-lock every distinct shard of the batch (each once: RWMutex read
//     locks must not be taken recursively), then load each block's home
//     table slot;
//  2. follow each probe run in the (now cached) table to the first slot
//     with the key's tag: the candidate entry, or proof of absence;
//  3. load the candidate block entries;
//  4. verify them (a tag collision falls back to the ordinary probe) and
//     touch each block's residency run;
//  5. walk the batch in chain order on cached data, stopping at the first
//     missing block or when no candidate is left.
//
// The batch's read locks are held from 1 to 5 (one batch is ~1–2 µs), so a
// batch is read as of one moment. They are taken in ascending shard order
// and every writer holds at most one shard lock at a time, so holding
// several read locks cannot deadlock (see lockW and shardLocks).
func (ix *Index) matchChain(pe *partEnt, chain []uint64, counts []uint32, uniform uint32, res *Result) int {
	cs := res.cands[:0]
	alive := 0
	part, pm := pe.id, partMix(pe.id)
	var buf [walkBatch]probe
	var lk shardLocks
	stop := false
	for base := 0; base < len(chain) && !stop; base += walkBatch {
		batch := chain[base:min(len(chain), base+walkBatch)]
		pr := buf[:len(batch)]
		for k, h := range batch {
			mx := keyMixP(pm, h)
			pr[k].mx = mx
			lk.add(shardOf(mx))
		}
		lk.rlockAll(ix)
		n := ix.resolveProbes(pr, batch, part)
		if n < len(batch) {
			stop = true
		}
		cs, alive = walkRun(cs, alive, pr[:n], base, counts, uniform)
		if alive == 0 {
			stop = true
		}
		lk.runlockAll(ix)
	}
	for ci := range cs {
		if cs[ci].alive {
			cs[ci].mad, cs[ci].alive = uint32(alive), false
		}
	}
	res.cands = cs
	return len(cs)
}

// resolveProbes runs passes 1–4 of matchChain over one batch of the chain
// in partition part, whose probes pr carry their key mixes and whose
// shards are read-locked. It returns how many leading blocks of the batch
// are present; pr[:n] then hold each one's shard, block and residency run.
func (ix *Index) resolveProbes(pr []probe, batch []uint64, part uint32) int {
	// Pass 1: home slot words.
	for k := range pr {
		p := &pr[k]
		d := ix.shards[shardOf(p.mx)].d
		p.d = d
		p.slot = (p.mx >> shardBits) & uint64(len(d.table)-1)
		p.e = d.table[p.slot]
	}
	// Pass 2: candidate entries; the walk stops at the first block
	// proven absent, so nothing after it is loaded.
	n := len(pr)
	for k := range pr {
		p := &pr[k]
		if p.bi = p.d.candidate(p.mx, &p.slot, p.e); p.bi < 0 {
			n = k
			break
		}
	}
	pr = pr[:n]
	// Pass 3: block entries.
	for k := range pr {
		p := &pr[k]
		b := &p.d.blocks[p.bi]
		p.hash, p.part, p.off, p.n = b.hash, b.part, b.resOff, uint32(b.resN)
	}
	// Pass 4: verify, touch the residency runs.
	for k, h := range batch[:n] {
		p := &pr[k]
		if p.hash != h || p.part != part {
			// Tag collision (1/256 per foreign slot): probe on.
			bi := p.d.findFrom(part, h, p.mx, p.slot+1)
			if bi < 0 {
				return k
			}
			b := &p.d.blocks[bi]
			p.bi, p.off, p.n = int32(bi), b.resOff, uint32(b.resN)
		}
		p.r0 = p.d.res[p.off]
	}
	return n
}

// walkRun is pass 5 of matchChain: the leading-run walk over the resolved
// probes pr (chain blocks base, base+1, …), in chain order. The first
// block of the chain starts one candidate per replica holding it; each
// later block extends the candidates still alive and ends the others,
// which record how many replicas were alive before that block. It returns
// the candidates and how many are alive; the walk stops when none is.
func walkRun(cs []cand, alive int, pr []probe, base int, counts []uint32, uniform uint32) ([]cand, int) {
	for k := range pr {
		p := &pr[k]
		i := base + k
		cnt := uniform
		if len(counts) > 0 {
			cnt = counts[i]
		}
		rs := p.d.res[p.off : p.off+p.n]
		if i == 0 {
			for _, r := range rs {
				cs = append(cs, cand{rep: resRep(r), depth: 1, tokens: uint64(cnt), minSeen: resSeen(r), alive: true})
			}
			alive = len(cs)
		} else {
			before := uint32(alive)
			for ci := range cs {
				c := &cs[ci]
				if !c.alive {
					continue
				}
				found := false
				for _, r := range rs {
					if resRep(r) == c.rep {
						found = true
						c.depth++
						c.tokens += uint64(cnt)
						if sn := resSeen(r); sn < c.minSeen {
							c.minSeen = sn
						}
						break
					}
				}
				if !found {
					// Every replica alive before this block reaches
					// this candidate's depth.
					c.alive, c.mad = false, before
					alive--
				}
			}
		}
		if alive == 0 {
			break
		}
	}
	return cs, alive
}

// walkBatch is how many chain blocks matchChain resolves together: enough
// to cover a typical chain (24 blocks) in one batch, small enough for the
// CPU's out-of-order window to overlap a pass's loads.
const walkBatch = 32

// probe is one chain block's resolution state in a matchChain batch.
type probe struct {
	d    *shardData
	mx   uint64 // keyMix(partition, hash)
	slot uint64 // home slot, then the candidate's slot
	hash uint64 // candidate entry's hash and partition, to verify
	r0   uint64 // first residency word (loaded only to touch the run)
	e    uint32 // home slot word
	bi   int32  // candidate block index, -1 when absent
	part uint32
	off  uint32 // residency run offset and length
	n    uint32
}

// shardLocks is the set of shards a lookup batch read-locks, each once
// (RWMutex read locks are not reentrant: a second RLock of a shard behind
// a waiting writer would deadlock), in ascending shard order. The order
// matters since the apply may run several writers (parallel.go): a writer
// waiting on a shard blocks new readers of it, so two lookups taking the
// same two shards in opposite orders, each behind another writer, would
// wait on each other for ever. Writers hold one shard lock at a time, so
// with ordered readers every chain of waits ends.
type shardLocks struct {
	held [numShards / 64]uint64
	list [walkBatch]uint16
	n    int
}

// add records shard si for rlockAll.
func (l *shardLocks) add(si int) {
	w, bit := si>>6, uint64(1)<<(si&63)
	if l.held[w]&bit != 0 {
		return
	}
	l.held[w] |= bit
	l.list[l.n] = uint16(si)
	l.n++
}

// rlockAll read-locks the added shards in ascending order: the order of
// the bitmap's set bits (a comparison sort of the list measured ~0.5 µs
// per lookup, its branches unpredictable; the 64-word scan is a few ns).
func (l *shardLocks) rlockAll(ix *Index) {
	for w, x := range l.held {
		for ; x != 0; x &= x - 1 {
			ix.shards[w<<6|bits.TrailingZeros64(x)].mu.RLock()
		}
	}
}

func (l *shardLocks) runlockAll(ix *Index) {
	// Clear only the bits set (the bitmap is 512 bytes; a batch locks at
	// most walkBatch shards).
	for _, si := range l.list[:l.n] {
		ix.shards[si].mu.RUnlock()
		l.held[si>>6] = 0
	}
	l.n = 0
}

// matchExact matches the prefix hash alone; matched_tokens is the stored
// cumulative count. matched_blocks is the chain length when the prefix is
// the chain's last hash, else 1.
func (ix *Index) matchExact(pe *partEnt, prefix uint64, chain []uint64, res *Result) int {
	depth := uint32(1)
	if len(chain) > 0 && chain[len(chain)-1] == prefix {
		depth = uint32(len(chain))
	}
	cs := res.cands[:0]
	mx := keyMix(pe.id, prefix)
	s := &ix.shards[shardOf(mx)]
	s.mu.RLock()
	d := s.d
	if bi, _ := d.find(pe.id, prefix, mx); bi >= 0 {
		b := &d.blocks[bi]
		rs := d.residents(b)
		for _, r := range rs {
			cs = append(cs, cand{rep: resRep(r), depth: depth, tokens: uint64(b.cum), minSeen: resSeen(r), mad: uint32(len(rs))})
		}
	}
	s.mu.RUnlock()
	res.cands = cs
	return len(cs)
}

// loads fills res.Loads: the replicas whose fresh stats serve the
// request's (scheme, model), replica id ascending.
func (ix *Index) loads(ps *polState, req *LookupRequest, res *Result) {
	ix.metaMu.RLock()
	defer ix.metaMu.RUnlock()
	m := ix.m
	st := m.statSM[smKey{req.Partition.Scheme, req.Partition.Model}]
	if st == nil || !statsFresh(req.NowMs, st.max, ps.freshMs) {
		return
	}
	for rep, at := range st.by {
		if !statsFresh(req.NowMs, at, ps.freshMs) {
			continue
		}
		rec := m.stats[rep]
		if rec == nil {
			continue
		}
		l := Load{ReplicaID: m.reps.ids[rep], WaitingRequests: rec.s.WaitingRequests, RunningRequests: rec.s.RunningRequests,
			Pressure: rec.s.Pressure}
		if d := req.NowMs - rec.s.ObservedAtMs; d > 0 {
			l.AgeMs = uint64(d)
		}
		res.Loads = append(res.Loads, l)
	}
	slices.SortFunc(res.Loads, func(a, b Load) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
}
