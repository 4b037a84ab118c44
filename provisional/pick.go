package provisional

import (
	"errors"
	"fmt"
	"time"

	"github.com/inference-cache/inference-cache/ident"
	"github.com/inference-cache/inference-cache/pickerload"
)

// Limits and defaults (contract §5.12, §9).
const (
	// DefaultMaxAge is how long a pick is held when its push gives no max
	// age: the engines' events confirm a stored block 0.1 to 0.7 s after
	// the request reaches a vLLM engine, and a prefill queued behind a
	// busy replica's batch still starts well within it; past it the engine
	// may have evicted the blocks again, and only its events say so.
	DefaultMaxAge = 10 * time.Second
	// MinMaxAge and MaxMaxAge bound Pick.MaxAge.
	MinMaxAge = 100 * time.Millisecond
	MaxMaxAge = 10 * time.Minute
	// DefaultMaxBlocks bounds the (pick, block) entries a Store holds:
	// 1,000 requests in flight of 4,000 tokens each at 16 tokens a block,
	// four times over; about 40 MiB.
	DefaultMaxBlocks = 1 << 20
	// MaxBlocksPerPick bounds one pick's chain: the lookup's bound on a
	// chain (api.MaxChainLength).
	MaxBlocksPerPick = 8192
	// MaxPickerIDBytes and MaxIDBytes bound the ids (contract §9.2).
	MaxPickerIDBytes = pickerload.MaxPickerIDBytes
	MaxIDBytes       = 256
	// maxTombstones bounds the removals remembered ahead of their pick;
	// past it the oldest is forgotten (losing it loses nothing held: at
	// worst a late add of a removed pick lives until its max age).
	maxTombstones = 65536
)

// ErrInvalid is wrapped by every *FieldError: the push breaks a rule of
// its own. Sending it again is refused again.
var ErrInvalid = errors.New("invalid provisional pick push")

// ErrFull is wrapped by the error of a push whose picks would take the
// store past Config.MaxBlocks. The push is refused whole; what the store
// held stays as it was.
var ErrFull = errors.New("provisional residency store full")

// FieldError names the field of a push at fault, as the wire names it
// (e.g. "picks[2].block_hashes"), and the rule it breaks. It wraps
// ErrInvalid.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Partition is the index partition of a pick's blocks (contract §4): the
// same four ids a lookup names.
type Partition struct {
	Scheme, Model, Tenant, Adapter string
}

// Pick is one request a picker sent to a replica
// (inferencecache.v1.ProvisionalPick).
type Pick struct {
	// ID is unique among the picker's picks (the SDK counts from the
	// clock, so a restarted picker does not reuse one).
	ID uint64
	// Replica names the replica as the picker names its backends.
	Replica   string
	Partition Partition
	// Hashes are the request's prefix block hashes in the partition's
	// fingerprint (contract §3, the cache_salt mixed in), Counts their
	// tokens (parallel; empty = 16 each, vLLM's default block size). In a
	// full state a pick without hashes is listed by its id alone: it
	// keeps the pick where it is held and adds nothing where it is not
	// (the picker re-sends hashes only for its recent picks).
	Hashes []uint64
	Counts []uint32
	// Age is how long before the push the pick was made (0 for a delta;
	// a full state re-sends older picks): its expiry is dated from then.
	Age time.Duration
	// MaxAge is how long the pick is held; 0 = DefaultMaxAge, else
	// MinMaxAge to MaxMaxAge.
	MaxAge time.Duration
	// CachedTokens is the prompt tokens the picker counted as already on
	// the replica when it picked (confirmed or provisional): the
	// request's queued prefill there is the rest (Match.Repeated).
	CachedTokens uint32
	// Prefilled says, in a full state, that the request has its first
	// token: its prefill no longer queues the replica.
	Prefilled bool
}

// Push is one message of a picker (inferencecache.v1.SharePicksRequest).
type Push struct {
	// PickerID names the picker: required, at most MaxPickerIDBytes, the
	// id of its load reports (contract §5.11).
	PickerID string
	// Sequence increases with every push of the picker (at least 1).
	Sequence uint64
	// Full says Picks are every live pick of the picker: any pick of
	// older pushes not listed is dropped.
	Full bool
	// Picks are added; Removed are the ids of picks removed (the request
	// failed or was cancelled).
	Picks   []Pick
	Removed []uint64
	// Prefilled are the ids of picks whose request has its first token
	// (ids not held are ignored: the next full state carries the flag).
	Prefilled []uint64
	// Age is how long ago the push first reached a node of the cluster (a
	// peer's queue delay for one passed on), added to every pick's Age.
	Age time.Duration
}

// maxAge is p's max age with the default applied.
func (p *Pick) maxAge() time.Duration {
	if p.MaxAge == 0 {
		return DefaultMaxAge
	}
	return p.MaxAge
}

// Validate checks the push, returning a *FieldError naming the first
// field at fault (wire names) and the limit.
func (p *Push) Validate() error {
	switch {
	case p.PickerID == "":
		return &FieldError{"picker_id", "required (the picker's id, as in its load reports)"}
	case len(p.PickerID) > MaxPickerIDBytes:
		return &FieldError{"picker_id", fmt.Sprintf("%d bytes, over the limit of %d", len(p.PickerID), MaxPickerIDBytes)}
	case p.Sequence == 0:
		return &FieldError{"sequence", "required: at least 1, increasing with every push of the picker"}
	}
	if msg := ident.Problem(p.PickerID); msg != "" {
		return &FieldError{"picker_id", msg}
	}
	for i := range p.Picks {
		if p.Full && len(p.Picks[i].Hashes) == 0 {
			continue // listed by id alone: keeps the pick if held
		}
		if err := p.Picks[i].validate(i); err != nil {
			return err
		}
	}
	return nil
}

func (k *Pick) validate(i int) error {
	f := func(name string) string { return fmt.Sprintf("picks[%d].%s", i, name) }
	if k.Replica == "" {
		return &FieldError{f("replica_id"), "required"}
	}
	for _, id := range []struct{ name, v string }{{"replica_id", k.Replica}, {"hash_scheme", k.Partition.Scheme},
		{"model_id", k.Partition.Model}, {"tenant_id", k.Partition.Tenant}, {"adapter_id", k.Partition.Adapter}} {
		if len(id.v) > MaxIDBytes {
			return &FieldError{f(id.name), fmt.Sprintf("%d bytes, over the limit of %d", len(id.v), MaxIDBytes)}
		}
		if id.v != "" {
			if msg := ident.Problem(id.v); msg != "" {
				return &FieldError{f(id.name), msg}
			}
		}
	}
	switch {
	case k.Partition.Scheme == "":
		return &FieldError{f("hash_scheme"), "required (the index partition's hash scheme, e.g. vllm)"}
	case len(k.Hashes) == 0:
		return &FieldError{f("block_hashes"), "required: at least one full block"}
	case len(k.Hashes) > MaxBlocksPerPick:
		return &FieldError{f("block_hashes"), fmt.Sprintf("%d blocks, over the limit of %d", len(k.Hashes), MaxBlocksPerPick)}
	case len(k.Counts) != 0 && len(k.Counts) != len(k.Hashes):
		return &FieldError{f("block_token_counts"), fmt.Sprintf("%d counts for %d block_hashes: give one per block, or none", len(k.Counts), len(k.Hashes))}
	case k.MaxAge < 0, k.MaxAge != 0 && (k.MaxAge < MinMaxAge || k.MaxAge > MaxMaxAge):
		return &FieldError{f("max_age_ms"), fmt.Sprintf("%d: want 0 (the default, %d) or %d to %d",
			k.MaxAge.Milliseconds(), DefaultMaxAge.Milliseconds(), MinMaxAge.Milliseconds(), MaxMaxAge.Milliseconds())}
	}
	for j, c := range k.Counts {
		if c == 0 || c > 4096 {
			return &FieldError{f(fmt.Sprintf("block_token_counts[%d]", j)), fmt.Sprintf("%d: want 1 to 4096", c)}
		}
	}
	return nil
}
