package observe

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

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

// extraKeys decodes vLLM's extra_keys: nil, or one entry per block, each
// nil or an array of keys (see ExtraKeys).
func (d *Decoder) extraKeys(e *Event) error {
	n, null, err := d.optArray()
	if err != nil || null {
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
