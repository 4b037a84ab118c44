package observe

import (
	"log/slog"
	"math"
	"strconv"
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
// content fingerprint (the chained hash, SPEC 3), the cumulative tokens of
// the prefix up to and including it, and its adapter partition (an index
// into replica.adapters).
type blockEntry struct {
	fp      uint64
	cum     uint32
	adapter uint32
}

// replica is the translator's state for one replica id.
type replica struct {
	id       string
	blocks   map[uint64]blockEntry // engine hash → entry
	adapters []string              // adapter ids, interned
	adapterN map[string]uint32
}

func newReplica(id string) *replica {
	return &replica{id: id, blocks: make(map[uint64]blockEntry), adapters: []string{""}, adapterN: map[string]uint32{"": 0}}
}

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
	// mismatchLogged rate-limits the block-size mismatch log line.
	mismatchLoggedAt time.Time
	parentLoggedAt   time.Time // last unknown-parent warning
}

func newTranslator(cfg *EngineConfig, rank int64, m *engineMetrics, log *slog.Logger) *translator {
	t := &translator{cfg: cfg, rank: rank, media: map[string]bool{}, m: m, log: log, reps: map[string]*replica{}}
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
// is the adapter id itself; an integer id n becomes "lora-id:<n>"; nil or 0
// (vLLM's LoRA ids start at 1) is the base model.
func adapterOf(e *Event) string {
	if e.LoraName != "" {
		return e.LoraName
	}
	if e.HasLoraID && e.LoraID != 0 {
		return "lora-id:" + strconv.FormatInt(e.LoraID, 10)
	}
	return ""
}

// indexed reports whether an event's KV group and medium are indexed: only
// the main attention group (group_idx 0) and the configured media (nil or
// empty medium means GPU).
func (t *translator) indexed(e *Event) bool {
	if e.GroupIdx != 0 {
		t.m.ignoredGroup.Inc()
		return false
	}
	md := e.Medium
	if md == "" {
		md = "GPU"
	}
	if !t.media[md] && !t.media[upper(md)] {
		t.m.ignoredMedium.Inc()
		return false
	}
	return true
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
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
			dst = t.stored(dst, r, e, atMs, now)
			if len(r.blocks) > maxBlocksPerReplica {
				t.m.overflows.Inc()
				t.log.Warn("engine hash map reached its bound; clearing the replica", "engine", t.cfg.ReplicaID, "replica", r.id, "blocks", len(r.blocks))
				dst = t.clearReplica(dst, r.id, "overflow", atMs)
				r = t.reps[r.id]
			}
		case EventBlockRemoved:
			t.m.removed.Inc()
			dst = t.removed(dst, r, e, atMs)
		case EventAllBlocksCleared:
			t.m.cleared.Inc()
			// Only this replica's blocks: other ranks and engines keep theirs.
			dst = t.clearReplica(dst, r.id, "all_blocks_cleared", atMs)
			r = t.reps[r.id]
		default:
			t.m.unknownEvents.Inc()
		}
	}
	return dst
}

func (t *translator) stored(dst []*pb.BlockEvent, r *replica, e *Event, atMs int64, now time.Time) []*pb.BlockEvent {
	if !t.indexed(e) {
		return dst
	}
	bs := int(t.cfg.BlockSize)
	if e.BlockSize != int64(bs) {
		// Keys made with another block size never match the gateway's: every
		// lookup for this engine would miss without an error anywhere. Make
		// it loud (error log at most every 10 s, plus a counter).
		t.m.blockSizeMismatch.Inc()
		if now.Sub(t.mismatchLoggedAt) >= 10*time.Second {
			t.mismatchLoggedAt = now
			t.log.Error("engine block_size differs from the configured block_size: its events are rejected and this engine gets no prefix hits until the config is fixed",
				"engine", t.cfg.ReplicaID, "replica", r.id, "event_block_size", e.BlockSize, "configured_block_size", bs)
		}
		return dst
	}
	k := len(e.BlockHashes)
	if k == 0 || len(e.TokenIDs) != k*bs {
		t.m.tokenMismatch.Inc()
		return dst
	}
	var parentFP uint64
	var before uint32
	chained := e.HasParent // the first block chains from a known parent
	if e.HasParent {
		p, ok := r.blocks[e.Parent]
		switch {
		case ok:
			parentFP, before = p.fp, p.cum
		case e.Parent == 0:
			// Some publishers (llm-d's vLLM simulator) send 0, not nil, for a
			// chain's first block; 0 names no block this engine stored, so it
			// starts a chain.
			chained = false
		default:
			// Never chain from a guess: the fingerprint would name another
			// prefix. Children of this event will be dropped the same way.
			t.m.unknownParent.Inc()
			if now.Sub(t.parentLoggedAt) >= 10*time.Second {
				t.parentLoggedAt = now
				t.log.Warn("stored blocks dropped: their parent block is unknown to the subscriber (missed events, or a publisher restart); later blocks chained to them are dropped too (counted in unknown_parent_total; logged at most every 10 s)",
					"engine", t.cfg.ReplicaID, "replica", r.id, "parent", e.Parent, "blocks_lost", len(e.BlockHashes))
			}
			return dst
		}
	}
	if uint64(before)+uint64(k*bs) > math.MaxUint32 {
		t.m.tokenMismatch.Inc()
		return dst
	}
	adapter := adapterOf(e)
	ai := r.adapterIndex(adapter)
	fps := make([]uint64, k)
	counts := make([]uint32, k)
	for i := 0; i < k; i++ {
		local := fingerprint.LocalHash(e.TokenIDs[i*bs : (i+1)*bs])
		h := local
		if i > 0 || chained {
			h = fingerprint.Chain(parentFP, local)
		}
		fps[i], counts[i] = h, uint32(bs)
		parentFP = h
		r.blocks[e.BlockHashes[i]] = blockEntry{fp: h, cum: before + uint32((i+1)*bs), adapter: ai}
	}
	ev := t.base(pb.BlockEvent_STORED, r.id, atMs)
	ev.AdapterId = adapter
	ev.BlockHashes, ev.BlockTokenCounts, ev.PrefixTokensBefore = fps, counts, before
	t.m.emitStored.Inc()
	return append(dst, ev)
}

func (t *translator) removed(dst []*pb.BlockEvent, r *replica, e *Event, atMs int64) []*pb.BlockEvent {
	if !t.indexed(e) {
		return dst
	}
	// One REMOVED event per adapter partition, in order of first
	// appearance, so the output is deterministic.
	var byAdapter [][]uint64
	var order []uint32
	for _, h := range e.BlockHashes {
		ent, ok := r.blocks[h]
		if !ok {
			t.m.unknownRemovals.Inc()
			continue
		}
		delete(r.blocks, h)
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
