package vllmpub

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is the msgpack form of a batch. vLLM's msgspec encodes
// array_like Structs positionally; map form is what engines with
// array_like off send.
type Encoding string

// Encodings.
const (
	EncodingPositional Encoding = "positional"
	EncodingMap        Encoding = "map"
)

// BatchEncoder writes one EventBatch at a time into a reused buffer:
// Begin, then exactly as many BlockRemoved and BlockStored calls as Begin
// announced, then End. Its field order and map keys are those of vLLM's
// EventBatch (ts, events, data_parallel_rank), BlockStored (block_hashes,
// parent_block_hash, token_ids, block_size, lora_id, medium, lora_name)
// (and extra_keys, BlockStoredSalted) and BlockRemoved (block_hashes,
// medium). Not safe for concurrent use.
type BatchEncoder struct {
	form Encoding
	buf  bytes.Buffer
	e    *msgpack.Encoder
	err  error
}

// NewBatchEncoder returns an encoder for form; "" is positional.
func NewBatchEncoder(form Encoding) (*BatchEncoder, error) {
	if form == "" {
		form = EncodingPositional
	}
	if form != EncodingPositional && form != EncodingMap {
		return nil, fmt.Errorf("vllmpub: event encoding %q: want positional or map", form)
	}
	b := &BatchEncoder{form: form}
	b.e = msgpack.NewEncoder(&b.buf)
	return b, nil
}

func (b *BatchEncoder) put(err error) {
	if b.err == nil {
		b.err = err
	}
}

// key writes a map key; positional form has none.
func (b *BatchEncoder) key(k string) {
	if b.form == EncodingMap {
		b.put(b.e.EncodeString(k))
	}
}

// head opens a tagged event struct of n fields (the tag included).
func (b *BatchEncoder) head(tag string, n int) {
	if b.form == EncodingMap {
		b.put(b.e.EncodeMapLen(n))
	} else {
		b.put(b.e.EncodeArrayLen(n))
	}
	b.key("type")
	b.put(b.e.EncodeString(tag))
}

// Begin starts a batch stamped ts (seconds since the epoch) that will hold
// events events.
func (b *BatchEncoder) Begin(ts float64, events int) {
	b.buf.Reset()
	b.err = nil
	if b.form == EncodingMap {
		b.put(b.e.EncodeMapLen(3))
	} else {
		b.put(b.e.EncodeArrayLen(3))
	}
	b.key("ts")
	b.put(b.e.EncodeFloat64(ts))
	b.key("events")
	b.put(b.e.EncodeArrayLen(events))
}

func (b *BatchEncoder) hashes(hs []uint64) {
	b.put(b.e.EncodeArrayLen(len(hs)))
	for _, h := range hs {
		b.put(b.e.EncodeUint64(h))
	}
}

// BlockRemoved appends a BlockRemoved event of hashes on medium.
func (b *BatchEncoder) BlockRemoved(hashes []uint64, medium string) {
	b.head("BlockRemoved", 3)
	b.key("block_hashes")
	b.hashes(hashes)
	b.key("medium")
	b.put(b.e.EncodeString(medium))
}

// BlockStored appends a BlockStored event: hashes chained to parent (nil
// without hasParent), the blocks' token ids, blockSize tokens per block,
// on medium, without a LoRA adapter (lora_id and lora_name nil).
func (b *BatchEncoder) BlockStored(hashes []uint64, parent uint64, hasParent bool, tokens []uint32, blockSize int, medium string) {
	b.blockStored(hashes, parent, hasParent, tokens, blockSize, medium, "", 0, "")
}

// BlockStoredSalted is BlockStored for a request with a cache_salt: when
// the run starts the request's prompt (no parent), its first block's
// extra_keys carry the salt as vLLM's untyped key tuple (extra_keys =
// [[salt], nil, …], the form before event_version 1), as vLLM mixes the
// salt into the first block's hash only. An empty salt is BlockStored.
func (b *BatchEncoder) BlockStoredSalted(hashes []uint64, parent uint64, hasParent bool, tokens []uint32, blockSize int, medium, salt string) {
	if hasParent {
		salt = ""
	}
	b.blockStored(hashes, parent, hasParent, tokens, blockSize, medium, salt, 0, "")
}

// BlockStoredLoRA is BlockStoredSalted for a request of LoRA adapter
// lora (lora_id loraID ≥ 1): lora_id and lora_name are set, and every
// block's extra_keys tuple starts with the adapter's name, the salt
// after it on the prompt's first block, as vLLM's
// generate_block_hash_extra_keys orders them (LoRA name, multimodal
// items, cache_salt; vllm/v1/core/kv_cache_utils.py at 001cabc1).
func (b *BatchEncoder) BlockStoredLoRA(hashes []uint64, parent uint64, hasParent bool, tokens []uint32, blockSize int, medium, salt string, loraID int, lora string) {
	if hasParent {
		salt = ""
	}
	b.blockStored(hashes, parent, hasParent, tokens, blockSize, medium, salt, loraID, lora)
}

func (b *BatchEncoder) blockStored(hashes []uint64, parent uint64, hasParent bool, tokens []uint32, blockSize int, medium, salt string, loraID int, lora string) {
	n := 8
	if salt != "" || lora != "" {
		n = 9
	}
	b.head("BlockStored", n)
	b.key("block_hashes")
	b.hashes(hashes)
	b.key("parent_block_hash")
	if hasParent {
		b.put(b.e.EncodeUint64(parent))
	} else {
		b.put(b.e.EncodeNil())
	}
	b.key("token_ids")
	b.put(b.e.EncodeArrayLen(len(tokens)))
	for _, t := range tokens {
		b.put(b.e.EncodeUint(uint64(t)))
	}
	b.key("block_size")
	b.put(b.e.EncodeInt(int64(blockSize)))
	b.key("lora_id")
	if lora != "" {
		b.put(b.e.EncodeInt(int64(loraID)))
	} else {
		b.put(b.e.EncodeNil())
	}
	b.key("medium")
	b.put(b.e.EncodeString(medium))
	b.key("lora_name")
	if lora != "" {
		b.put(b.e.EncodeString(lora))
	} else {
		b.put(b.e.EncodeNil())
	}
	if lora != "" {
		b.key("extra_keys")
		b.put(b.e.EncodeArrayLen(len(hashes)))
		for i := range hashes {
			keys := 1
			if i == 0 && salt != "" {
				keys = 2
			}
			b.put(b.e.EncodeArrayLen(keys))
			b.put(b.e.EncodeString(lora))
			if keys == 2 {
				b.put(b.e.EncodeString(salt))
			}
		}
	} else if salt != "" {
		b.key("extra_keys")
		b.put(b.e.EncodeArrayLen(len(hashes)))
		for i := range hashes {
			if i > 0 {
				b.put(b.e.EncodeNil())
				continue
			}
			b.put(b.e.EncodeArrayLen(1))
			b.put(b.e.EncodeString(salt))
		}
	}
}

// End closes the batch with its data-parallel rank and returns a copy of
// its bytes (the publisher keeps them for replay while the encoder is
// reused), or the first encoding error.
func (b *BatchEncoder) End(rank int) ([]byte, error) {
	b.key("data_parallel_rank")
	b.put(b.e.EncodeInt(int64(rank)))
	if b.err != nil {
		return nil, fmt.Errorf("vllmpub: encode batch: %w", b.err)
	}
	return bytes.Clone(b.buf.Bytes()), nil
}
