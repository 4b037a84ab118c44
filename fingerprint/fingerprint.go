package fingerprint

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of every hash in the scheme (contract §3.2).
const Seed = 1337

// MaxBlockSize bounds the tokens per block; it keeps the per-block scratch
// buffer on the stack.
const MaxBlockSize = 4096

// DefaultBlockSize is the tokens per block of a model with no block size
// of its own (contract §3.1): vLLM's default KV block size on GPUs. It is
// the one definition every package (policy, gateway, observe, the engine
// model) refers to.
const DefaultBlockSize = 16

// ErrBlockSize is returned for a block size of 0 or above MaxBlockSize.
var ErrBlockSize = errors.New("fingerprint: block size must be between 1 and 4096 tokens")

// LocalHash returns XXH3_64bits_withSeed(LE32(tokens[0]) ‖ … , 1337): the
// content hash of one block alone. len(tokens) must be at most MaxBlockSize.
func LocalHash(tokens []uint32) uint64 {
	if len(tokens) == 0 {
		return xxh3.HashSeed(nil, Seed)
	}
	if littleEndian {
		// On a little-endian machine the uint32s already are LE32 bytes:
		// hash them in place instead of copying.
		return xxh3.HashSeed(unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), len(tokens)*4), Seed)
	}
	buf := make([]byte, len(tokens)*4)
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[i*4:], t)
	}
	return xxh3.HashSeed(buf, Seed)
}

// littleEndian reports whether uint32s are laid out as LE32 bytes in memory.
var littleEndian = func() bool {
	x := uint32(0x01020304)
	return *(*byte)(unsafe.Pointer(&x)) == 0x04
}()

// Chain returns XXH3_64bits_withSeed(LE64(parent) ‖ LE64(local), 1337): the
// hash of the prefix ending in a block whose local hash is local, after the
// prefix whose hash is parent.
func Chain(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

// AppendBlockHashes appends the chained block hashes h_0 … h_{k−1} of tokens
// (k = len(tokens)/blockSize; the partial tail is dropped) to dst and returns
// the extended slice. It allocates only when dst lacks capacity. The prefix
// hash is the last element when k > 0.
func AppendBlockHashes(dst []uint64, tokens []uint32, blockSize int) ([]uint64, error) {
	if blockSize < 1 || blockSize > MaxBlockSize {
		return dst, ErrBlockSize
	}
	var parent uint64
	k := len(tokens) / blockSize
	for i := 0; i < k; i++ {
		local := LocalHash(tokens[i*blockSize : (i+1)*blockSize])
		h := local
		if i > 0 {
			h = Chain(parent, local)
		}
		dst = append(dst, h)
		parent = h
	}
	return dst, nil
}

// SaltRoot returns the hash that stands in for "no parent" at the root of a
// salted chain: XXH3_64bits_withSeed(salt, 1337) over the salt's UTF-8
// bytes as given (no length prefix, no terminator). An empty salt has no
// root (ok = false): the chain is the unsalted one of contract §3.2.
func SaltRoot(salt string) (root uint64, ok bool) {
	if salt == "" {
		return 0, false
	}
	return xxh3.HashStringSeed(salt, Seed), true
}

// AppendSaltedBlockHashes is AppendBlockHashes in the hash domain of a
// cache salt (vLLM's per-request cache_salt, SGLang's
// BlockStoredMetadata.cache_salt), so two tenants with different salts
// never share a key. With s = SaltRoot(salt):
//
//	h_0 = XXH3_64bits_withSeed(LE64(s) ‖ LE64(local_0), 1337)   = Chain(s, local_0)
//	h_i = XXH3_64bits_withSeed(LE64(h_{i−1}) ‖ LE64(local_i), 1337) for i ≥ 1
//
// local_i as in contract §3.2. An empty salt gives exactly AppendBlockHashes (the
// contract §3.5 golden vectors). Errors: ErrBlockSize.
func AppendSaltedBlockHashes(dst []uint64, tokens []uint32, blockSize int, salt string) ([]uint64, error) {
	root, salted := SaltRoot(salt)
	if !salted {
		return AppendBlockHashes(dst, tokens, blockSize)
	}
	if blockSize < 1 || blockSize > MaxBlockSize {
		return dst, ErrBlockSize
	}
	parent := root
	k := len(tokens) / blockSize
	for i := 0; i < k; i++ {
		h := Chain(parent, LocalHash(tokens[i*blockSize:(i+1)*blockSize]))
		dst = append(dst, h)
		parent = h
	}
	return dst, nil
}

// AppendLocalHashes appends the local (unchained) hash of each full block
// to dst; used by tests and diagnostics.
func AppendLocalHashes(dst []uint64, tokens []uint32, blockSize int) ([]uint64, error) {
	if blockSize < 1 || blockSize > MaxBlockSize {
		return dst, ErrBlockSize
	}
	k := len(tokens) / blockSize
	for i := 0; i < k; i++ {
		dst = append(dst, LocalHash(tokens[i*blockSize:(i+1)*blockSize]))
	}
	return dst, nil
}

// Key is a whole fingerprint: the chain, per-block token counts and the
// prefix hash. HasPrefix is false when there is no full block (no key).
type Key struct {
	BlockHashes      []uint64
	BlockTokenCounts []uint32
	PrefixHash       uint64
	HasPrefix        bool
}

// Compute returns the Key of tokens for blockSize (contract §3.3). It allocates the
// two slices; hot paths use AppendBlockHashes with reused buffers.
func Compute(tokens []uint32, blockSize int) (Key, error) {
	return ComputeSalted(tokens, blockSize, "")
}

// ComputeSalted returns the Key of tokens for blockSize in the hash domain
// of salt (AppendSaltedBlockHashes); "" is Compute.
func ComputeSalted(tokens []uint32, blockSize int, salt string) (Key, error) {
	hs, err := AppendSaltedBlockHashes(nil, tokens, blockSize, salt)
	if err != nil {
		return Key{}, err
	}
	k := Key{BlockHashes: hs, BlockTokenCounts: make([]uint32, len(hs))}
	for i := range k.BlockTokenCounts {
		k.BlockTokenCounts[i] = uint32(blockSize)
	}
	if len(hs) > 0 {
		k.PrefixHash, k.HasPrefix = hs[len(hs)-1], true
	}
	if k.BlockHashes == nil {
		k.BlockHashes = []uint64{}
	}
	return k, nil
}
