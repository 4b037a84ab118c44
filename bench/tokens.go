package bench

// VocabSize bounds the synthesised token ids (a 32k vocabulary, like
// Mistral's); small ids also keep the msgpack events compact.
const VocabSize = 32000

// mix64 is the SplitMix64 finaliser: a fast, well-distributed bijection.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// AppendBlockTokens appends the first n (≤ 512) token ids of the block
// named hashID. The ids depend only on hashID and the position, so every
// request containing the block carries the same tokens there, and two
// different hash ids give different token blocks (with overwhelming
// probability), so the content fingerprint of contract §3 tells them apart
// exactly as the trace's ids do.
func AppendBlockTokens(dst []uint32, hashID uint64, n int) []uint32 {
	seed := mix64(hashID ^ 0x5bd1e9955bd1e995)
	for j := 0; j < n; j++ {
		dst = append(dst, uint32(mix64(seed+uint64(j))%VocabSize))
	}
	return dst
}

// AppendPromptTokens appends the request's whole prompt, input_length
// tokens: 512 per hash id, the last block cut to the remainder.
func AppendPromptTokens(dst []uint32, r *Request) []uint32 {
	for j, h := range r.HashIDs {
		n := min(TraceBlockTokens, r.InputLength-j*TraceBlockTokens)
		if n <= 0 {
			break
		}
		dst = AppendBlockTokens(dst, h, n)
	}
	return dst
}
