package observe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

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

// ExtraKeys is what the subscriber needs from a BlockStored's extra keys:
// vLLM's extra_keys (one entry per block, each nil or a tuple of the keys
// its block hash mixed in: the LoRA name, multimodal (identifier, offset)
// pairs, the cache_salt on a request's first block, prompt-embeds hashes;
// untyped tuples before event_version 1, tagged maps {"type": "lora" |
// "mm" | "cache_salt" | "prompt_embeds" | "legacy", …} since), and SGLang's
// BlockStoredMetadata {"cache_salt"}.
type ExtraKeys struct {
	// HasContent is set when some block's hash mixes in content that is
	// not in token_ids (multimodal items, prompt embeddings, or a key of
	// unknown shape); ContentFrom is the index of the first such block.
	HasContent  bool
	ContentFrom int
	// Lora is the LoRA name of a typed LoRAKey ("" when none).
	Lora string
	// Salt is the cache salt of a typed CacheSaltKey on the first block or
	// of SGLang's metadata ("" when none).
	Salt string
	// Strings0 are the untyped string keys of the first block in order
	// (the LoRA name comes first, the cache_salt last; which is which is
	// decided with the event's lora fields, see saltAndLora).
	Strings0 []string
	// StringLater is the first untyped string key of a later block (a
	// LoRA name: the salt is on the first block only).
	StringLater string
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

// kind of container at the current position.
const (
	isArray = iota
	isMap
)

func (d *Decoder) container() (kind, n int, err error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, 0, err
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err = d.dec.DecodeArrayLen()
		kind = isArray
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err = d.dec.DecodeMapLen()
		kind = isMap
	default:
		return 0, 0, fmt.Errorf("expected an array or a map, got code 0x%02x", c)
	}
	if err != nil {
		return 0, 0, err
	}
	if err := d.guardLen(n); err != nil {
		return 0, 0, err
	}
	return kind, n, nil
}

// guardLen refuses a length that cannot fit in the remaining input (each
// element takes at least one byte), so a forged header cannot make the
// decoder allocate gigabytes.
func (d *Decoder) guardLen(n int) error {
	if n < 0 || n > d.r.Len() {
		return fmt.Errorf("length %d exceeds the %d remaining bytes", n, d.r.Len())
	}
	return nil
}

func (d *Decoder) isNil() (bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.dec.DecodeNil()
	}
	return false, nil
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

func (d *Decoder) skipN(n int) error {
	for ; n > 0; n-- {
		if err := d.dec.Skip(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) key() (string, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("map key is not a string (code 0x%02x)", c)
	}
	return d.dec.DecodeString()
}

func (d *Decoder) float() (float64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("expected a number, got code 0x%02x", c)
	}
	return d.dec.DecodeFloat64()
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64) || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

func isSigned(c byte) bool {
	return (msgpcode.IsFixedNum(c) && int8(c) < 0) || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// int decodes an integer; nilOK maps nil to (0, false).
func (d *Decoder) int() (int64, bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		return 0, false, d.dec.DecodeNil()
	}
	if !isInt(c) {
		return 0, false, fmt.Errorf("expected an integer, got code 0x%02x", c)
	}
	if c == msgpcode.Uint64 {
		v, err := d.dec.DecodeUint64()
		if err != nil {
			return 0, false, err
		}
		if v > math.MaxInt64 {
			return 0, false, fmt.Errorf("integer %d overflows int64", v)
		}
		return int64(v), true, nil
	}
	v, err := d.dec.DecodeInt64()
	return v, true, err
}

// str decodes a string or nil ("").
func (d *Decoder) str() (string, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return "", err
	}
	if c == msgpcode.Nil {
		return "", d.dec.DecodeNil()
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("expected a string, got code 0x%02x", c)
	}
	return d.dec.DecodeString()
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

// hash decodes one block hash in any of its three representations.
func (d *Decoder) hash() (uint64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	switch {
	case isSigned(c):
		v, err := d.dec.DecodeInt64()
		return uint64(v), err
	case isInt(c):
		return d.dec.DecodeUint64()
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := d.dec.DecodeBytes()
		if err != nil {
			return 0, err
		}
		return FoldHashBytes(b), nil
	}
	return 0, fmt.Errorf("block hash: expected an integer or bytes, got code 0x%02x", c)
}

// FoldHashBytes folds a raw-bytes engine block hash to uint64: its last 8
// bytes read big-endian, left-padded with zeros when shorter.
func FoldHashBytes(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

func (d *Decoder) hashList(e *Event) error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		return d.dec.DecodeNil()
	}
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if err := d.guardLen(n); err != nil {
		return err
	}
	e.hashOff = len(d.hashes)
	for i := 0; i < n; i++ {
		h, err := d.hash()
		if err != nil {
			return fmt.Errorf("block_hashes[%d]: %w", i, err)
		}
		d.hashes = append(d.hashes, h)
	}
	e.hashLen = n
	return nil
}

func (d *Decoder) parent(e *Event) error {
	isNil, err := d.isNil()
	if err != nil || isNil {
		return err
	}
	h, err := d.hash()
	if err != nil {
		return fmt.Errorf("parent_block_hash: %w", err)
	}
	e.Parent, e.HasParent = h, true
	return nil
}

func (d *Decoder) tokenList(e *Event) error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return err
	}
	if c == msgpcode.Nil {
		return d.dec.DecodeNil()
	}
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if err := d.guardLen(n); err != nil {
		return err
	}
	e.tokOff = len(d.tokens)
	for i := 0; i < n; i++ {
		c, err := d.dec.PeekCode()
		if err != nil {
			return err
		}
		if !isInt(c) {
			return fmt.Errorf("token_ids[%d]: expected an integer, got code 0x%02x", i, c)
		}
		v, err := d.dec.DecodeInt64()
		if err != nil {
			return fmt.Errorf("token_ids[%d]: %w", i, err)
		}
		if c == msgpcode.Uint64 || v < 0 || v > math.MaxUint32 {
			return fmt.Errorf("token_ids[%d]: %d is not an unsigned 32-bit token id", i, v)
		}
		d.tokens = append(d.tokens, uint32(v))
	}
	e.tokLen = n
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

// peekMap reports whether the next value is a map.
func (d *Decoder) peekMap() bool {
	c, err := d.dec.PeekCode()
	return err == nil && (msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32)
}

// extraKeys decodes vLLM's extra_keys: nil, or one entry per block, each
// nil or an array of keys (see ExtraKeys).
func (d *Decoder) extraKeys(e *Event) error {
	isNil, err := d.isNil()
	if err != nil || isNil {
		return err
	}
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if err := d.guardLen(n); err != nil {
		return err
	}
	for b := 0; b < n; b++ {
		isNil, err := d.isNil()
		if err != nil {
			return fmt.Errorf("[%d]: %w", b, err)
		}
		if isNil {
			continue
		}
		m, err := d.dec.DecodeArrayLen()
		if err != nil {
			return fmt.Errorf("[%d]: %w", b, err)
		}
		if err := d.guardLen(m); err != nil {
			return err
		}
		for k := 0; k < m; k++ {
			if err := d.extraKey(e, b); err != nil {
				return fmt.Errorf("[%d][%d]: %w", b, k, err)
			}
		}
	}
	return nil
}

// content marks block b as mixing in content that is not in token_ids.
func (x *ExtraKeys) content(b int) {
	if !x.HasContent || b < x.ContentFrom {
		x.HasContent, x.ContentFrom = true, b
	}
}

// extraKey decodes one key of block b: an untyped string (LoRA name or
// cache_salt), bytes (a prompt-embeds hash), an [identifier, offset]
// array (a multimodal item), or a typed {"type": …} map; anything else is
// content of unknown shape.
func (d *Decoder) extraKey(e *Event, b int) error {
	c, err := d.dec.PeekCode()
	if err != nil {
		return err
	}
	x := &e.Extra
	switch {
	case msgpcode.IsString(c):
		v, err := d.dec.DecodeString()
		if err != nil {
			return err
		}
		if b == 0 {
			x.Strings0 = append(x.Strings0, v)
		} else if x.StringLater == "" {
			x.StringLater = v
		}
		return nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return d.typedExtraKey(e, b)
	}
	// Bytes (prompt embeds), arrays (multimodal) and unknown shapes all
	// make the block's hash depend on more than its tokens.
	x.content(b)
	return d.dec.Skip()
}

// typedExtraKey decodes an event_version 1 ExtraKey map.
func (d *Decoder) typedExtraKey(e *Event, b int) error {
	n, err := d.dec.DecodeMapLen()
	if err != nil {
		return err
	}
	if err := d.guardLen(n); err != nil {
		return err
	}
	var tag, name, salt string
	for i := 0; i < n; i++ {
		k, err := d.key()
		if err != nil {
			return err
		}
		switch k {
		case "type":
			tag, err = d.str()
		case "name":
			name, err = d.str()
		case "salt":
			salt, err = d.str()
		default:
			err = d.dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	switch tag {
	case "lora":
		if e.Extra.Lora == "" {
			e.Extra.Lora = name
		}
	case "cache_salt":
		if b == 0 {
			e.Extra.Salt = salt
		}
	default: // "mm", "prompt_embeds", "legacy" or a newer key
		e.Extra.content(b)
	}
	return nil
}

// sglangMetadata decodes SGLang's BlockStoredMetadata {"cache_salt": s}.
func (d *Decoder) sglangMetadata(e *Event) error {
	isNil, err := d.isNil()
	if err != nil || isNil {
		return err
	}
	n, err := d.dec.DecodeMapLen()
	if err != nil {
		return err
	}
	if err := d.guardLen(n); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := d.key()
		if err != nil {
			return err
		}
		if k == "cache_salt" {
			if e.Extra.Salt, err = d.str(); err != nil {
				return fmt.Errorf("cache_salt: %w", err)
			}
			continue
		}
		if err := d.dec.Skip(); err != nil {
			return err
		}
	}
	return nil
}
