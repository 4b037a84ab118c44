package observe

import (
	"log/slog"
	"math"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// Re-blocking: an engine whose pages are smaller than the index's blocks
// (SGLang's default page is one token) is indexed by concatenating its
// pages along the chain into block_size-token blocks (EngineConfig.PageSize,
// observe/DESIGN.md). A page completes an index block when it is the
// block_size/page_size-th page since the previous block boundary; the
// block's fingerprint is contract §3.2's chain over the concatenated tokens, so it
// equals the gateway's key for the same prompt. Removing any page of a
// block removes the block: the engine no longer holds the whole block.

// pageEntry is what the translator remembers about one engine page.
type pageEntry struct {
	parent    uint64   // engine hash of the previous page (valid when hasParent)
	hasParent bool     // false: the page starts its chain
	tokens    []uint32 // the page's tokens
	pos       int      // pages of the current index block up to and including this one, 1..block_size/page_size
	base      uint64   // fingerprint the current index block chains from (valid when hasBase)
	hasBase   bool     // false: the current block is the chain's first (and unsalted)
	before    uint32   // tokens before the current index block
	adapter   uint32
	noIndex   bool     // not indexed, nor are the pages chained after it
	blocks    []uint64 // fingerprints of the index blocks this page is part of
}

// paged reports whether the engine's pages are smaller than the index's
// blocks.
func (t *translator) paged() bool {
	return t.cfg.PageSize > 0 && t.cfg.PageSize < t.cfg.BlockSize
}

// engineBlock is the engine's tokens per event block: the page size when
// re-blocking, else the block size.
func (t *translator) engineBlock() int {
	if t.paged() {
		return t.cfg.PageSize
	}
	return t.cfg.BlockSize
}

// pageStored records the pages of a store and emits a STORED event for
// every index block one of them completes.
func (t *translator) pageStored(dst []*pb.BlockEvent, r *replica, e *Event, atMs int64, now time.Time) []*pb.BlockEvent {
	if !t.checkStore(r, e, now) {
		return dst
	}
	ps, bs := t.cfg.PageSize, t.cfg.BlockSize
	per := bs / ps
	adapter := adapterOf(e)
	ai := r.adapterIndex(adapter)
	// The state "after the previous page": where the next page stands.
	var prev pageEntry
	var prevHash uint64
	hasPrev := false
	if e.HasParent && e.Parent != 0 {
		p, ok := r.pages[e.Parent]
		if !ok {
			t.m.unknownParent.Inc()
			t.drops.log(t, now, slog.LevelWarn, "unknown_parent", "stored pages dropped: their parent page is unknown to the subscriber (missed events, or a publisher restart); later pages chained to them are dropped too (counted in unknown_parent_total; logged at most every 10 s)",
				"replica", r.id, "parent", e.Parent, "pages_lost", len(e.BlockHashes))
			return dst
		}
		prev, prevHash, hasPrev = *p, e.Parent, true
	}
	noIndexFrom := len(e.BlockHashes)
	why := ""
	switch {
	case hasPrev && prev.noIndex:
		noIndexFrom, why = 0, "chained after a page that is not indexed"
	case e.Extra.HasContent:
		noIndexFrom, why = e.Extra.ContentFrom, "multimodal or prompt-embeds extra keys"
	}
	var saltRoot uint64
	salted := false
	if !hasPrev && noIndexFrom > 0 {
		salt, ok := saltOf(e, adapter)
		if !ok {
			noIndexFrom, why = 0, "extra keys of unknown shape on the first page"
		} else if salt != "" {
			saltRoot, salted = fingerprint.SaltRoot(salt)
		}
	}
	for i, h := range e.BlockHashes {
		pe := &pageEntry{parent: prevHash, hasParent: hasPrev, tokens: append([]uint32(nil), e.TokenIDs[i*ps:(i+1)*ps]...), adapter: ai}
		switch {
		case !hasPrev:
			pe.pos, pe.base, pe.hasBase = 1, saltRoot, salted
		case prev.pos == per:
			// The previous page completed a block: this one starts the next.
			pe.pos, pe.base, pe.hasBase, pe.before = 1, prev.blockFP(), true, prev.before+uint32(bs)
		default:
			pe.pos, pe.base, pe.hasBase, pe.before = prev.pos+1, prev.base, prev.hasBase, prev.before
		}
		pe.noIndex = i >= noIndexFrom || (hasPrev && prev.noIndex)
		if !pe.noIndex && uint64(pe.before)+uint64(bs) > math.MaxUint32 {
			pe.noIndex = true
		}
		r.pages[h] = pe
		if pe.pos == per && !pe.noIndex {
			dst = t.completeBlock(dst, r, h, pe, atMs)
		}
		prev, prevHash, hasPrev = *pe, h, true
	}
	if noIndexFrom < len(e.BlockHashes) {
		t.notIndexed(r, len(e.BlockHashes)-noIndexFrom, why, now)
	}
	return dst
}

// blockFP is the fingerprint of the index block a completing page ends
// (its last entry of blocks).
func (p *pageEntry) blockFP() uint64 {
	if len(p.blocks) == 0 {
		return 0
	}
	return p.blocks[len(p.blocks)-1]
}

// completeBlock gathers the block's tokens from the page chain ending in
// page h, emits its STORED event and records the block on each page. A
// page of the block missing from the map (removed meanwhile) leaves the
// block unindexed.
func (t *translator) completeBlock(dst []*pb.BlockEvent, r *replica, h uint64, last *pageEntry, atMs int64) []*pb.BlockEvent {
	ps, bs := t.cfg.PageSize, t.cfg.BlockSize
	per := bs / ps
	chain := make([]*pageEntry, per)
	chain[per-1] = last
	for j := per - 1; j > 0; j-- {
		p, ok := r.pages[chain[j].parent]
		if !chain[j].hasParent || !ok {
			last.noIndex = true
			return dst
		}
		chain[j-1] = p
	}
	tokens := make([]uint32, 0, bs)
	for _, p := range chain {
		tokens = append(tokens, p.tokens...)
	}
	fp := fingerprint.LocalHash(tokens)
	if last.hasBase {
		fp = fingerprint.Chain(last.base, fp)
	}
	for _, p := range chain {
		p.blocks = append(p.blocks, fp)
	}
	r.live[fp] = struct{}{}
	ev := t.base(pb.BlockEvent_STORED, r.id, atMs)
	ev.AdapterId = r.adapters[last.adapter]
	ev.BlockHashes, ev.BlockTokenCounts, ev.PrefixTokensBefore = []uint64{fp}, []uint32{uint32(bs)}, last.before
	t.m.emitStored.Inc()
	return append(dst, ev)
}

// pageRemoved forgets the removed pages and emits a REMOVED event for
// every live index block one of them was part of.
func (t *translator) pageRemoved(dst []*pb.BlockEvent, r *replica, e *Event, atMs int64, now time.Time) []*pb.BlockEvent {
	if !t.indexed(e, r.id, now) {
		return dst
	}
	unknown := 0
	for _, h := range e.BlockHashes {
		p, ok := r.pages[h]
		if !ok {
			unknown++
			continue
		}
		delete(r.pages, h)
		for _, fp := range p.blocks {
			if _, live := r.live[fp]; !live {
				continue // already removed through another of its pages
			}
			delete(r.live, fp)
			ev := t.base(pb.BlockEvent_REMOVED, r.id, atMs)
			ev.AdapterId = r.adapters[p.adapter]
			ev.BlockHashes, ev.BlockTokenCounts = []uint64{fp}, []uint32{uint32(t.cfg.BlockSize)}
			t.m.emitRemoved.Inc()
			dst = append(dst, ev)
		}
	}
	if unknown > 0 {
		t.unknownRemoval(r, unknown, now)
	}
	return dst
}
