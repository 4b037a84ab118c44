package client

import (
	"math"
)

// RendezvousPrefixTokens is how much of a prompt names its prefix for the
// picker's rendezvous (contract §5.10): the key is the chained hash of the
// last full block within the prompt's first RendezvousPrefixTokens tokens
// (the first block when a block is longer). Prompts that share this much
// are siblings worth one replica: a prefill of 2,048 tokens takes a
// replica 0.2 s or more, so sharing it beats spreading it for any
// sibling arriving within that time; prompts that share less draw apart.
const RendezvousPrefixTokens = 2048

// RendezvousKey is the rendezvous key of a prompt whose chained block
// hashes (contract §3, at blockSize tokens per block) are hashes: the hash
// of its last full block within the first RendezvousPrefixTokens tokens;
// 0 (no key) without a full block or with a block size below 1. A hash
// that is itself 0 is taken as 1, so every prompt with a block has a key.
func RendezvousKey(hashes []uint64, blockSize int) uint64 {
	if len(hashes) == 0 || blockSize < 1 {
		return 0
	}
	k := min(len(hashes), max(1, RendezvousPrefixTokens/blockSize))
	if h := hashes[k-1]; h != 0 {
		return h
	}
	return 1
}

// rendezvousWeight is replica's highest-random-weight hash for key:
// splitmix64's finalizer of key XOR the FNV-1a 64 hash of the replica id.
// Both are simple enough to port exactly (clients/python: picker.py).
func rendezvousWeight(key uint64, replica string) uint64 {
	return splitmix64(key ^ fnv1a64(replica))
}

// rendezvousGumbel turns the weight into a standard Gumbel variate
// −ln(−ln u), u = (weight's top 53 bits + 0.5) / 2^53 in (0, 1): the
// highest of −cost/scale + G over the candidates is a softmax draw
// (Gumbel-max), made by the key instead of a random stream.
func rendezvousGumbel(key uint64, replica string) float64 {
	u := (float64(rendezvousWeight(key, replica)>>11) + 0.5) / (1 << 53)
	return -math.Log(-math.Log(u))
}

// fnv1a64 is the 64-bit FNV-1a hash of s's bytes.
func fnv1a64(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}

// splitmix64 is the SplitMix64 output function (Steele, Lea, Flood 2014)
// applied to x: a bijective 64-bit mix.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
