package observe

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// maxBlocksPerReplica bounds one replica's engine-hash map. An engine's
// cache holds far fewer blocks (a 80 GiB GPU with 16-token blocks of a 8B
// model holds ~600k); reaching the bound means removals were lost, so the
// replica is cleared and the map restarted rather than grown without limit.
const maxBlocksPerReplica = 4 << 20

// blockEntry is what the translator remembers about one engine block: its
// content fingerprint (the chained hash, contract §3.2), the cumulative tokens of
// the prefix up to and including it, and its adapter partition (an index
// into replica.adapters).
type blockEntry struct {
	fp      uint64
	cum     uint32
	adapter uint32
	// noIndex marks a block that was not indexed (its hash mixes in
	// content beyond its tokens, or it chains after such a block): its
	// children are not indexed either and its removal emits nothing.
	noIndex bool
}

// replica is the translator's state for one replica id.
type replica struct {
	id       string
	blocks   map[uint64]blockEntry // engine hash → entry
	adapters []string              // adapter ids, interned
	adapterN map[string]uint32
	// pages and live are used instead of blocks when the engine's pages
	// are smaller than the index's blocks (reblock.go).
	pages map[uint64]*pageEntry // engine page hash → entry
	live  map[uint64]struct{}   // index blocks emitted STORED and not yet REMOVED
	// partial: the cluster holds blocks of this replica the map does not
	// know (a resume without replay, resume.go); removing one of them
	// clears the replica.
	partial bool
}

func newReplica(id string) *replica {
	return &replica{id: id, blocks: make(map[uint64]blockEntry), adapters: []string{""}, adapterN: map[string]uint32{"": 0},
		pages: map[uint64]*pageEntry{}, live: map[uint64]struct{}{}}
}

// size is the number of engine hashes the replica remembers.
func (r *replica) size() int { return len(r.blocks) + len(r.pages) }

func (r *replica) adapterIndex(a string) uint32 {
	if i, ok := r.adapterN[a]; ok {
		return i
	}
	i := uint32(len(r.adapters))
	r.adapters = append(r.adapters, a)
	r.adapterN[a] = i
	return i
}

// translator turns decoded engine events of one stream into BlockEvents
// (observe/DESIGN.md, one rule per case). It is pure: no clock (the
// caller passes times), no I/O, no goroutines.
type translator struct {
	cfg   *EngineConfig
	rank  int64 // the stream's data-parallel rank, used when a batch carries none
	media map[string]bool
	m     *engineMetrics
	log   *slog.Logger
	reps  map[string]*replica
	// fullGroup is the KV-cache group indexed (-1: not learned yet); see
	// groupIndexed.
	fullGroup int64
	drops     dropLog
}

func newTranslator(cfg *EngineConfig, rank int64, m *engineMetrics, log *slog.Logger) *translator {
	t := &translator{cfg: cfg, rank: rank, media: map[string]bool{}, m: m, log: log, reps: map[string]*replica{}, fullGroup: -1}
	for _, md := range cfg.Media {
		t.media[md] = true
	}
	// The stream's own replica is known from the start, so a clear at start
	// or on removal from the config reaches it even before any batch.
	t.reps[cfg.ReplicaForRank(rank)] = newReplica(cfg.ReplicaForRank(rank))
	return t
}

// msOf converts the engine's ts (seconds, float) to ms since the epoch; a
// missing or absurd ts gives 0, which the server replaces by its own clock.
func msOf(ts float64) int64 {
	if !(ts > 0) || ts > 1e12 || math.IsInf(ts, 0) {
		return 0
	}
	return int64(math.Round(ts * 1000))
}

func (t *translator) base(kind pb.BlockEvent_Kind, rep string, atMs int64) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: kind, ReplicaId: rep, HashScheme: t.cfg.HashScheme, ModelId: t.cfg.ModelID, TenantId: t.cfg.TenantID, ObservedAtMs: atMs}
}

// clearAll appends a CLEARED event for every replica of the stream, forgets
// their blocks, and counts the reason (start, restart, gap, decode_error,
// config_removed, overflow).
func (t *translator) clearAll(dst []*pb.BlockEvent, reason string, atMs int64) []*pb.BlockEvent {
	t.fullGroup = -1 // learned again from the next stores
	for id := range t.reps {
		dst = t.clearReplica(dst, id, reason, atMs)
	}
	return dst
}

func (t *translator) clearReplica(dst []*pb.BlockEvent, id, reason string, atMs int64) []*pb.BlockEvent {
	t.reps[id] = newReplica(id)
	t.m.clears.WithLabelValues(reason).Inc()
	t.m.emitCleared.Inc()
	return append(dst, t.base(pb.BlockEvent_CLEARED, id, atMs))
}

// markPartial marks every replica of the stream partial (replica.partial).
func (t *translator) markPartial() {
	for _, r := range t.reps {
		r.partial = true
	}
}

func (t *translator) replicaFor(b *Batch) *replica {
	rank := t.rank
	if b.HasDPRank {
		rank = b.DPRank
	}
	id := t.cfg.ReplicaForRank(rank)
	r := t.reps[id]
	if r == nil {
		r = newReplica(id)
		t.reps[id] = r
	}
	return r
}

// adapterOf implements "lora_name selects the adapter partition (lora_id
// only when no name is present, and then as a distinct id space)": a name
// is the adapter id itself — the event's lora_name, else the LoRA name in
// its extra_keys (a typed LoRAKey, or the first untyped string key when
// lora_id says a LoRA is active: vLLM puts the LoRA name first); an
// integer id n without any name becomes "lora-id:<n>"; nil or 0 (vLLM's
// LoRA ids start at 1) is the base model.
func adapterOf(e *Event) string {
	if e.LoraName != "" {
		return e.LoraName
	}
	if e.Extra.Lora != "" {
		return e.Extra.Lora
	}
	if e.HasLoraID && e.LoraID != 0 {
		if len(e.Extra.Strings0) > 0 {
			return e.Extra.Strings0[0]
		}
		if e.Extra.StringLater != "" {
			return e.Extra.StringLater
		}
		return "lora-id:" + strconv.FormatInt(e.LoraID, 10)
	}
	return ""
}

// saltOf returns the cache salt of a store that starts a chain: SGLang's
// metadata or a typed CacheSaltKey, else the untyped string key of the
// first block that is not the LoRA name (vLLM orders a block's keys LoRA
// name, multimodal items, cache_salt, prompt embeds). ok is false when the
// untyped strings cannot be told apart (more than one besides the LoRA
// name): the block's hash domain is unknown.
func saltOf(e *Event, adapter string) (salt string, ok bool) {
	if e.Extra.Salt != "" {
		return e.Extra.Salt, true
	}
	strs := e.Extra.Strings0
	if len(strs) > 0 && adapter != "" && strs[0] == adapter && (e.LoraName != "" || e.Extra.Lora != "" || e.HasLoraID && e.LoraID != 0) {
		strs = strs[1:]
	}
	switch len(strs) {
	case 0:
		return "", true
	case 1:
		return strs[0], true
	}
	return "", false
}

// apply appends the BlockEvents of one decoded batch to dst.
func (t *translator) apply(dst []*pb.BlockEvent, b *Batch, now time.Time) []*pb.BlockEvent {
	atMs := msOf(b.TS)
	r := t.replicaFor(b)
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case EventBlockStored:
			t.m.stored.Inc()
			if t.paged() {
				dst = t.pageStored(dst, r, e, atMs, now)
			} else {
				dst = t.stored(dst, r, e, atMs, now)
			}
			if r.size() > maxBlocksPerReplica {
				t.m.overflows.Inc()
				t.log.Warn("engine hash map reached its bound; clearing the replica", "engine", t.cfg.ReplicaID, "replica", r.id, "blocks", r.size())
				dst = t.clearReplica(dst, r.id, "overflow", atMs)
				r = t.reps[r.id]
			}
		case EventBlockRemoved:
			t.m.removed.Inc()
			if t.paged() {
				dst = t.pageRemoved(dst, r, e, atMs, now)
			} else {
				dst = t.removed(dst, r, e, atMs, now)
			}
		case EventAllBlocksCleared:
			t.m.cleared.Inc()
			// Only this replica's blocks: other ranks and engines keep theirs.
			dst = t.clearReplica(dst, r.id, "all_blocks_cleared", atMs)
			r = t.reps[r.id]
		default:
			t.m.unknownEvents.Inc()
			t.drops.log(t, now, slog.LevelWarn, "unknown_event", "engine event of an unknown type skipped (counted in unknown_events_total); a newer engine may need a newer subscriber",
				"replica", r.id, "tag", e.Tag)
		}
	}
	return dst
}

// checkStore applies the checks every store passes before translation:
// the indexed group, locality and medium; the engine's tokens per event
// block (the configured page_size, else block_size); token_ids of exactly
// that many tokens per block hash. It reports whether e may be translated.
func (t *translator) checkStore(r *replica, e *Event, now time.Time) bool {
	if !t.indexed(e, r.id, now) {
		return false
	}
	per := t.engineBlock()
	if e.BlockSize != int64(per) {
		// Keys made with another block size never match the gateway's: every
		// lookup for this engine would miss without an error anywhere. Make
		// it loud (error log at most every 10 s, plus a counter).
		t.m.blockSizeMismatch.Inc()
		t.drops.log(t, now, slog.LevelError, "block_size", "engine block_size differs from the configured block_size (page_size when set): its events are rejected and this engine gets no prefix hits until the config is fixed",
			"replica", r.id, "event_block_size", e.BlockSize, "configured_block_size", per, "blocks_lost", len(e.BlockHashes))
		return false
	}
	if len(e.BlockHashes) == 0 || len(e.TokenIDs) != len(e.BlockHashes)*per {
		t.m.tokenMismatch.Inc()
		t.drops.log(t, now, slog.LevelWarn, "token_length", "stored blocks dropped: token_ids is not block_size tokens per block hash (counted in token_length_mismatch_total)",
			"replica", r.id, "block_hashes", len(e.BlockHashes), "token_ids", len(e.TokenIDs), "block_size", per, "blocks_lost", len(e.BlockHashes))
		return false
	}
	return true
}

// notIndexed counts and logs n stored blocks left out of the index because
// their engine hash mixes in content that is not in token_ids (or chains
// after such a block): a lookup by token ids alone could match them
// against another image or embedding (observe/DESIGN.md).
func (t *translator) notIndexed(r *replica, n int, why string, now time.Time) {
	t.m.notIndexedContent.Add(float64(n))
	t.drops.log(t, now, slog.LevelInfo, "content", "stored blocks not indexed: their hash covers more than their token ids (by design; counted in not_indexed_content_blocks_total)",
		"replica", r.id, "why", why, "blocks_lost", n)
}

func (t *translator) stored(dst []*pb.BlockEvent, r *replica, e *Event, atMs int64, now time.Time) []*pb.BlockEvent {
	if !t.checkStore(r, e, now) {
		return dst
	}
	bs := int(t.cfg.BlockSize)
	k := len(e.BlockHashes)
	cs, ok := t.chainStart(r, e, now)
	if !ok {
		return dst
	}
	if uint64(cs.before)+uint64(k*bs) > math.MaxUint32 {
		t.m.tokenMismatch.Inc()
		t.drops.log(t, now, slog.LevelWarn, "token_length", "stored blocks dropped: the chain would pass 2^32 tokens",
			"replica", r.id, "tokens_before", cs.before, "blocks_lost", k)
		return dst
	}
	adapter := adapterOf(e)
	cut, why := indexCut(e, adapter, &cs)
	fps, counts := fingerprintBlocks(r, e, bs, cut, cs, r.adapterIndex(adapter))
	if cut < k {
		t.notIndexed(r, k-cut, why, now)
	}
	if len(fps) == 0 {
		return dst
	}
	ev := t.base(pb.BlockEvent_STORED, r.id, atMs)
	ev.AdapterId = adapter
	ev.BlockHashes, ev.BlockTokenCounts, ev.PrefixTokensBefore = fps, counts, cs.before
	t.m.emitStored.Inc()
	return append(dst, ev)
}

// chainPos is where a STORED event's blocks attach.
type chainPos struct {
	fp      uint64 // the fingerprint the first block chains from
	before  uint32 // tokens before the first block
	chained bool   // the first block chains from fp
	noIndex bool   // the parent block is not indexed
}

// chainStart finds where e's blocks attach in r: after their parent block,
// or at the start of a chain. ok is false (the event is dropped and
// counted) when the parent is unknown.
func (t *translator) chainStart(r *replica, e *Event, now time.Time) (cs chainPos, ok bool) {
	if !e.HasParent {
		return cs, true
	}
	cs.chained = true // the first block chains from a known parent
	p, ok := r.blocks[e.Parent]
	switch {
	case ok:
		cs.fp, cs.before, cs.noIndex = p.fp, p.cum, p.noIndex
	case e.Parent == 0:
		// Some publishers (llm-d's vLLM simulator) send 0, not nil, for a
		// chain's first block; 0 names no block this engine stored, so it
		// starts a chain.
		cs.chained = false
	default:
		// Never chain from a guess: the fingerprint would name another
		// prefix. Children of this event will be dropped the same way.
		t.m.unknownParent.Inc()
		t.drops.log(t, now, slog.LevelWarn, "unknown_parent", "stored blocks dropped: their parent block is unknown to the subscriber (missed events, or a publisher restart); later blocks chained to them are dropped too (counted in unknown_parent_total; logged at most every 10 s)",
			"replica", r.id, "parent", e.Parent, "blocks_lost", len(e.BlockHashes))
		return cs, false
	}
	return cs, true
}

// indexCut returns from which block on e's blocks are not indexed, and
// why: they (or a block before them) mix content beyond their tokens into
// their hash. A chain's first block carries the request's cache_salt: it
// is the root of the hash domain (fingerprint.AppendSaltedBlockHashes),
// set into cs.
func indexCut(e *Event, adapter string, cs *chainPos) (int, string) {
	cut, why := len(e.BlockHashes), ""
	switch {
	case cs.noIndex:
		cut, why = 0, "chained after a block that is not indexed"
	case e.Extra.HasContent && e.Extra.ContentFrom < cut:
		cut, why = e.Extra.ContentFrom, "multimodal or prompt-embeds extra keys"
	}
	if !cs.chained && cut > 0 {
		salt, ok := saltOf(e, adapter)
		switch {
		case !ok:
			cut, why = 0, "extra keys of unknown shape on the first block"
		case salt != "":
			cs.fp, _ = fingerprint.SaltRoot(salt)
			cs.chained = true
		}
	}
	return cut, why
}

// fingerprintBlocks records every block of e in r (adapter index ai) and
// returns the fingerprints and token counts of the blocks before cut,
// chained from cs.
func fingerprintBlocks(r *replica, e *Event, bs, cut int, cs chainPos, ai uint32) ([]uint64, []uint32) {
	parentFP := cs.fp
	fps := make([]uint64, 0, cut)
	counts := make([]uint32, 0, cut)
	for i := range e.BlockHashes {
		if i >= cut {
			r.blocks[e.BlockHashes[i]] = blockEntry{noIndex: true, adapter: ai}
			continue
		}
		local := fingerprint.LocalHash(e.TokenIDs[i*bs : (i+1)*bs])
		h := local
		if i > 0 || cs.chained {
			h = fingerprint.Chain(parentFP, local)
		}
		fps, counts = append(fps, h), append(counts, uint32(bs))
		parentFP = h
		r.blocks[e.BlockHashes[i]] = blockEntry{fp: h, cum: cs.before + uint32((i+1)*bs), adapter: ai}
	}
	return fps, counts
}

// unknownRemoval counts and logs removed hashes the subscriber never saw
// stored; nothing is lost (right after a start, or for blocks of ignored
// media or groups, they are expected).
func (t *translator) unknownRemoval(r *replica, n int, now time.Time) {
	t.m.unknownRemovals.Add(float64(n))
	t.drops.log(t, now, slog.LevelWarn, "unknown_removal", "removed block hashes the subscriber never saw stored were ignored (expected right after a start; counted in unknown_removals_total)",
		"replica", r.id, "hashes", n)
}

func (t *translator) removed(dst []*pb.BlockEvent, r *replica, e *Event, atMs int64, now time.Time) []*pb.BlockEvent {
	if !t.indexed(e, r.id, now) {
		return dst
	}
	// One REMOVED event per adapter partition, in order of first
	// appearance, so the output is deterministic.
	var byAdapter [][]uint64
	var order []uint32
	unknown := 0
	for _, h := range e.BlockHashes {
		ent, ok := r.blocks[h]
		if !ok {
			unknown++
			continue
		}
		delete(r.blocks, h)
		if ent.noIndex {
			continue
		}
		j := -1
		for n, a := range order {
			if a == ent.adapter {
				j = n
				break
			}
		}
		if j < 0 {
			order = append(order, ent.adapter)
			byAdapter = append(byAdapter, nil)
			j = len(order) - 1
		}
		byAdapter[j] = append(byAdapter[j], ent.fp)
	}
	if unknown > 0 && r.partial {
		t.log.Warn("the engine removed blocks stored before the subscriber resumed: clearing the replica, whose claims can no longer be kept exact", "engine", t.cfg.ReplicaID, "replica", r.id, "hashes", unknown)
		return t.clearReplica(dst, r.id, "partial_map", atMs)
	}
	if unknown > 0 {
		t.unknownRemoval(r, unknown, now)
	}
	for n, a := range order {
		ev := t.base(pb.BlockEvent_REMOVED, r.id, atMs)
		ev.AdapterId = r.adapters[a]
		ev.BlockHashes = byAdapter[n]
		ev.BlockTokenCounts = make([]uint32, len(byAdapter[n]))
		for i := range ev.BlockTokenCounts {
			ev.BlockTokenCounts[i] = uint32(t.cfg.BlockSize)
		}
		t.m.emitRemoved.Inc()
		dst = append(dst, ev)
	}
	return dst
}

// dropLogEvery is the rate limit of each kind of drop log line, per stream.
const dropLogEvery = 10 * time.Second

// dropFrames is the drop kind of a message that is not [topic, seq,
// payload].
const dropFrames = "frames"

// dropLog rate-limits the log lines of dropped or ignored engine events
// and messages (contract §6.9): at most one line per kind every
// dropLogEvery per stream (the counters count every one). The zero value
// is ready to use; safe for concurrent use.
type dropLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// allow reports whether a line of kind may be written at now (none was
// less than dropLogEvery before), and if so records it.
func (d *dropLog) allow(now time.Time, kind string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[string]time.Time{}
	}
	if last, ok := d.last[kind]; ok && now.Sub(last) < dropLogEvery {
		return false
	}
	d.last[kind] = now
	return true
}

// log writes msg at level for kind unless allow refuses it, naming the
// engine and kind; args add what was lost.
func (d *dropLog) log(t *translator, now time.Time, level slog.Level, kind, msg string, args ...any) {
	if d.allow(now, kind) {
		t.log.Log(context.Background(), level, msg, append([]any{"engine", t.cfg.ReplicaID, "drop", kind}, args...)...)
	}
}
