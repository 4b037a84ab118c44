package simengine

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// blockHasher computes the engine's own block hashes the way vLLM's
// prefix cache does (vllm/v1/core/kv_cache_utils.py hash_block_tokens):
// each full block's hash is SHA-256 over its parent's hash (a per-process
// seed, vLLM's NONE_HASH, for the first block), its token ids and, on the
// first block only, the request's cache_salt, and on every block the LoRA
// adapter's name (vLLM's generate_block_hash_extra_keys puts it first in
// every block's extra keys); on the wire it is the
// digest's low 64 bits (maybe_convert_block_hash with int block hashes).
// The bytes hashed are not vLLM's CBOR encoding: nobody can recompute an
// engine's hashes anyway (the seed is per process), and the subscriber
// keys the index on token_ids, so what must be exact is which blocks
// chain to which and their tokens.
type blockHasher struct {
	seed [32]byte
}

// newBlockHasher seeds the chain with seed, or at random when seed is 0.
func newBlockHasher(seed uint64) blockHasher {
	var h blockHasher
	if seed == 0 {
		_, _ = rand.Read(h.seed[:]) // never fails (crypto/rand)
		return h
	}
	binary.BigEndian.PutUint64(h.seed[:8], seed)
	h.seed = sha256.Sum256(h.seed[:8])
	return h
}

// appendHashes appends the hashes of tokens' full blocks of size bs to
// dst, for LoRA adapter lora ("" = the base model).
func (h blockHasher) appendHashes(dst []uint64, tokens []uint32, bs int, salt, lora string) []uint64 {
	parent := h.seed
	buf := make([]byte, 0, 40+len(salt)+len(lora)+4*bs)
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		buf = append(buf[:0], parent[:]...)
		if lora != "" {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(lora))|1<<31) // apart from a salt's length
			buf = append(buf, lora...)
		}
		if i == 0 && salt != "" {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(salt)))
			buf = append(buf, salt...)
		}
		for _, t := range tokens[i*bs : (i+1)*bs] {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		parent = sha256.Sum256(buf)
		dst = append(dst, binary.BigEndian.Uint64(parent[24:]))
	}
	return dst
}
