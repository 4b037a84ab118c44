package observe

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// EventKind is the type of one engine KV-cache event.
type EventKind uint8

// The engine event kinds (vLLM kv_events.py tags). EventUnknown is a tag this
// decoder does not know (a newer engine); such events are skipped and
// counted, never an error.
const (
	EventUnknown EventKind = iota
	EventBlockStored
	EventBlockRemoved
	EventAllBlocksCleared
)

// String returns the engine's tag for k.
func (k EventKind) String() string {
	switch k {
	case EventBlockStored:
		return "BlockStored"
	case EventBlockRemoved:
		return "BlockRemoved"
	case EventAllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Event is one decoded engine event. Fields that the wire form omitted hold
// their zero value and the matching Has… flag is false.
type Event struct {
	Kind EventKind
	// Tag is the raw tag string when Kind is EventUnknown (for logs).
	Tag string
	// BlockHashes are the engine's opaque block hashes, normalised to
	// uint64 (see DecodeBatch for the three wire representations).
	BlockHashes []uint64
	// Parent is the engine hash of the block preceding BlockHashes[0];
	// HasParent is false when the wire value was nil or absent (the chain
	// starts at the beginning of the prompt).
	Parent    uint64
	HasParent bool
	// TokenIDs are the tokens of every block of the event, concatenated
	// (BlockStored only).
	TokenIDs []uint32
	// BlockSize is the engine's tokens per block (BlockStored only; 0 when
	// absent).
	BlockSize int64
	// LoraID is the integer LoRA id; HasLoraID is false for nil/absent.
	LoraID    int64
	HasLoraID bool
	// LoraName is the adapter name ("" when nil or absent).
	LoraName string
	// Medium is the storage medium ("" when nil or absent, which means GPU).
	Medium string
	// GroupIdx is the KV-cache group (0 when absent: the main attention
	// group).
	GroupIdx int64
	// SpecKind is vLLM's kv_cache_spec_kind of the group ("" when absent;
	// values of vllm/v1/kv_cache_interface.py KVCacheSpecKind, e.g.
	// "full_attention", "sliding_window", "mamba").
	SpecKind string
	// Locality is vLLM's locality: "LOCAL" or "REMOTE" relative to the
	// publisher ("" when absent: unspecified).
	Locality string
	// Extra summarises extra_keys (vLLM) and SGLang's BlockStoredMetadata.
	Extra ExtraKeys

	// Offsets into the Decoder's arenas, resolved at the end of Decode.
	hashOff, hashLen, tokOff, tokLen int
}

// Batch is one decoded engine message payload: [ts, events, dp_rank?] or
// its map form.
type Batch struct {
	// TS is the engine's timestamp in seconds since the Unix epoch.
	TS float64
	// Events are the batch's events in engine order.
	Events []Event
	// DPRank is the data-parallel rank; HasDPRank is false when absent or
	// nil (older vLLM), which means rank 0.
	DPRank    int64
	HasDPRank bool
}

// ErrMalformed wraps every decoding failure: the payload is not a batch in
// either wire form. The subscriber counts it and treats the batch as lost.
var ErrMalformed = errors.New("observe: malformed event batch")

// Decoder decodes engine payloads. It reuses its buffers between calls, so a
// Batch returned by Decode is valid only until the next call. A Decoder is
// not safe for concurrent use; the zero value is not usable, call
// NewDecoder.
type Decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
	b   Batch
	// hashes and tokens are arenas the events' slices point into.
	hashes []uint64
	tokens []uint32
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	d := &Decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}

// DecodeBatch decodes payload with a fresh Decoder; the result does not
// alias any buffer. Hot paths use Decoder.Decode.
func DecodeBatch(payload []byte) (Batch, error) {
	b, err := NewDecoder().Decode(payload)
	if err != nil {
		return Batch{}, err
	}
	return *b, nil
}

// Decode decodes one msgpack payload (vLLM's KV-event wire format):
//
//   - the batch is either the positional array [ts, [events…],
//     data_parallel_rank?] or a map {"ts", "events", "data_parallel_rank"};
//   - each event is either a tagged positional array ["BlockStored",
//     block_hashes, parent_block_hash, token_ids, block_size, lora_id,
//     medium, lora_name, extra_keys?, group_idx?, kv_cache_spec_kind?,
//     kv_cache_spec_sliding_window?, locality?, ownership?],
//     ["BlockRemoved", block_hashes, medium, group_idx?, locality?,
//     ownership?], ["AllBlocksCleared"], or a map with "type" and the same
//     field names, default-valued fields omitted (vLLM's event_version and
//     ownership are skipped; extra_keys is summarised in Event.Extra);
//   - SGLang's positional BlockStored ends [… lora_id, medium, metadata?]:
//     a map where vLLM has lora_name is SGLang's BlockStoredMetadata;
//   - the batch's rank is "data_parallel_rank" (vLLM) or "attn_dp_rank"
//     (SGLang) in the map form, the third element in the positional one;
//   - every field after the tag may be absent (older engines) and takes its
//     default; unknown map keys and extra trailing elements are skipped;
//   - a block hash is an unsigned 64-bit int (any value), a signed int
//     (SGLang; its two's-complement bits are kept), or raw bytes (folded to
//     their last 8 bytes read big-endian, left-padded with zeros when
//     shorter).
//
// Any structural error returns an error wrapping ErrMalformed; Decode never
// panics on input. The returned Batch is valid until the next call.
func (d *Decoder) Decode(payload []byte) (b *Batch, err error) {
	defer func() {
		// The msgpack library is robust, but a decoder for untrusted input
		// must not take the process down whatever happens below it.
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("%w: panic while decoding: %v", ErrMalformed, p)
		}
	}()
	d.r.Reset(payload)
	d.dec.Reset(&d.r)
	d.b = Batch{Events: d.b.Events[:0]}
	d.hashes = d.hashes[:0]
	d.tokens = d.tokens[:0]
	if err := d.batch(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if d.r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after the batch", ErrMalformed, d.r.Len())
	}
	// Point the events' slices into the arenas now that they stopped
	// growing.
	for i := range d.b.Events {
		e := &d.b.Events[i]
		e.BlockHashes = d.hashes[e.hashOff : e.hashOff+e.hashLen : e.hashOff+e.hashLen]
		e.TokenIDs = d.tokens[e.tokOff : e.tokOff+e.tokLen : e.tokOff+e.tokLen]
	}
	return &d.b, nil
}

func (d *Decoder) batch() error {
	kind, n, err := d.container()
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if kind == isArray {
		if n < 2 {
			return fmt.Errorf("batch array has %d elements, want at least 2 (ts, events)", n)
		}
		if d.b.TS, err = d.float(); err != nil {
			return fmt.Errorf("batch ts: %w", err)
		}
		if err := d.events(); err != nil {
			return err
		}
		if n >= 3 {
			if err := d.rank(); err != nil {
				return err
			}
		}
		return d.skipN(n - 3)
	}
	var sawEvents bool
	for i := 0; i < n; i++ {
		key, err := d.key()
		if err != nil {
			return fmt.Errorf("batch key: %w", err)
		}
		switch key {
		case "ts":
			if d.b.TS, err = d.float(); err != nil {
				return fmt.Errorf("batch ts: %w", err)
			}
		case "events":
			if err := d.events(); err != nil {
				return err
			}
			sawEvents = true
		case "data_parallel_rank", "attn_dp_rank":
			// attn_dp_rank is SGLang's name for the same field.
			if err := d.rank(); err != nil {
				return err
			}
		default:
			if err := d.dec.Skip(); err != nil {
				return fmt.Errorf("batch field %q: %w", key, err)
			}
		}
	}
	if !sawEvents {
		return errors.New("batch map has no \"events\"")
	}
	return nil
}

func (d *Decoder) rank() error {
	v, ok, err := d.int()
	if err != nil {
		return fmt.Errorf("data_parallel_rank: %w", err)
	}
	if ok && v < 0 {
		return fmt.Errorf("data_parallel_rank %d is negative", v)
	}
	d.b.DPRank, d.b.HasDPRank = v, ok
	return nil
}

func (d *Decoder) events() error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		return d.dec.DecodeNil()
	}
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if err := d.guardLen(n); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	for i := 0; i < n; i++ {
		d.b.Events = append(d.b.Events, Event{})
		if err := d.event(&d.b.Events[len(d.b.Events)-1]); err != nil {
			return fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	return nil
}

func kindOf(tag string) EventKind {
	switch tag {
	case "BlockStored":
		return EventBlockStored
	case "BlockRemoved":
		return EventBlockRemoved
	case "AllBlocksCleared":
		return EventAllBlocksCleared
	}
	return EventUnknown
}

// field decodes the named field of an event of kind e.Kind; unknown names
// are skipped.
func (d *Decoder) field(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		err = d.hashList(e)
	case "parent_block_hash":
		err = d.parent(e)
	case "token_ids":
		err = d.tokenList(e)
	case "block_size":
		e.BlockSize, _, err = d.int()
	case "lora_id":
		e.LoraID, e.HasLoraID, err = d.int()
	case "medium":
		e.Medium, err = d.str()
	case "lora_name":
		e.LoraName, err = d.str()
	case "group_idx":
		e.GroupIdx, _, err = d.int()
	case "kv_cache_spec_kind":
		e.SpecKind, err = d.str()
	case "locality":
		e.Locality, err = d.str()
	case "extra_keys":
		err = d.extraKeys(e)
	case "metadata":
		err = d.sglangMetadata(e)
	default:
		err = d.dec.Skip()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// positional field names after the tag, per kind (vLLM field order).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality", "ownership"}
	removedFields = []string{"block_hashes", "medium", "group_idx", "locality", "ownership"}
)

func (d *Decoder) event(e *Event) error {
	kind, n, err := d.container()
	if err != nil {
		return err
	}
	if kind == isArray {
		if n < 1 {
			return errors.New("empty event array (no tag)")
		}
		tag, err := d.key()
		if err != nil {
			return fmt.Errorf("tag: %w", err)
		}
		e.Kind = kindOf(tag)
		var names []string
		switch e.Kind {
		case EventBlockStored:
			names = storedFields
		case EventBlockRemoved:
			names = removedFields
		case EventUnknown:
			e.Tag = tag
		}
		for i := 1; i < n; i++ {
			if i-1 < len(names) {
				name := names[i-1]
				if name == "lora_name" && d.peekMap() {
					// SGLang's BlockStoredWithMetadata appends its metadata
					// struct where vLLM has lora_name (a string or nil).
					name = "metadata"
				}
				if err := d.field(e, name); err != nil {
					return err
				}
			} else if err := d.dec.Skip(); err != nil {
				return err
			}
		}
		return nil
	}
	// Map form: the tag may come anywhere, so collect fields regardless
	// of kind and check the tag at the end.
	var tag string
	for i := 0; i < n; i++ {
		name, err := d.key()
		if err != nil {
			return fmt.Errorf("event key: %w", err)
		}
		if name == "type" {
			if tag, err = d.key(); err != nil {
				return fmt.Errorf("type: %w", err)
			}
			continue
		}
		if err := d.field(e, name); err != nil {
			return err
		}
	}
	if tag == "" {
		return errors.New("event map has no \"type\"")
	}
	e.Kind = kindOf(tag)
	if e.Kind == EventUnknown {
		e.Tag = tag
	}
	return nil
}
