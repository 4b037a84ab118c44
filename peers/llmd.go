package peers

import "math/rand/v2"

// LLMDConfig is the Endpoint Picker's default scheduling profile as llm-d
// deploys it (default-plugins.yaml) and its prefix plugin's defaults.
type LLMDConfig struct {
	// PrefixWeight, QueueWeight and KVWeight weigh the prefix-cache,
	// queue and kv-cache-utilization scorers (3, 2, 2).
	PrefixWeight, QueueWeight, KVWeight float64
	// MaxPrefixBlocks bounds the blocks of a request that are matched
	// (DefaultMaxPrefixBlocks 256); LRUCapacity the blocks the prefix
	// index keeps per endpoint (DefaultLRUCapacityPerServer 31250).
	MaxPrefixBlocks, LRUCapacity int
}

// DefaultLLMDConfig is the default profile: weights 3, 2, 2; 256 blocks;
// 31250 blocks per endpoint.
func DefaultLLMDConfig() LLMDConfig {
	return LLMDConfig{PrefixWeight: 3, QueueWeight: 2, KVWeight: 2, MaxPrefixBlocks: 256, LRUCapacity: 31250}
}

// LLMDEndpoint is one candidate's inputs to the scorers.
type LLMDEndpoint struct {
	// MatchedBlocks is the leading run of the request's blocks (at most
	// MaxPrefixBlocks of them) the prefix index holds for the endpoint.
	MatchedBlocks int
	// Waiting is the engine's waiting requests (vllm:num_requests_waiting
	// as last scraped); KVUsage its KV-cache usage, 0..1
	// (vllm:kv_cache_usage_perc).
	Waiting int
	KVUsage float64
}

// LLMDScores writes each endpoint's weighted score into out (grown to
// len(eps)) and returns it, higher is better:
//
//	PrefixWeight × matched / requestBlocks
//	+ QueueWeight × (max_waiting − waiting) / (max_waiting − min_waiting)   (1 when all are equal)
//	+ KVWeight × (1 − KVUsage)
//
// requestBlocks is the request's full blocks, capped at MaxPrefixBlocks;
// without any the prefix score is 0.
func LLMDScores(c LLMDConfig, requestBlocks int, eps []LLMDEndpoint, out []float64) []float64 {
	out = out[:0]
	if len(eps) == 0 {
		return out
	}
	if c.MaxPrefixBlocks > 0 {
		requestBlocks = min(requestBlocks, c.MaxPrefixBlocks)
	}
	lo, hi := eps[0].Waiting, eps[0].Waiting
	for _, e := range eps[1:] {
		lo, hi = min(lo, e.Waiting), max(hi, e.Waiting)
	}
	for _, e := range eps {
		prefix := 0.0
		if requestBlocks > 0 {
			prefix = float64(min(e.MatchedBlocks, requestBlocks)) / float64(requestBlocks)
		}
		queue := 1.0
		if hi > lo {
			queue = float64(hi-e.Waiting) / float64(hi-lo)
		}
		out = append(out, c.PrefixWeight*prefix+c.QueueWeight*queue+c.KVWeight*(1-e.KVUsage))
	}
	return out
}

// PickMax is the max-score picker: the highest score, ties uniformly at
// random (scores must not be empty).
func PickMax(scores []float64, rng *rand.Rand) int {
	best, n := 0, 0
	for i, v := range scores {
		switch {
		case n == 0 || v > scores[best]:
			best, n = i, 1
		case v == scores[best]:
			// Reservoir sampling: the k-th tie replaces the pick with
			// probability 1/k, so every tie is equally likely.
			n++
			if rng.IntN(n) == 0 {
				best = i
			}
		}
	}
	return best
}

// llmdBlockTokens is the block size the defaults are counted in
// (DefaultBlockSizeTokens, vLLM's 16).
const llmdBlockTokens = 16

// ForBlockSize is c with its block bounds (MaxPrefixBlocks, LRUCapacity,
// counted in 16-token blocks) restated in blocks of blockSize tokens, so
// that they bound the same number of tokens (at least 1 block each).
func (c LLMDConfig) ForBlockSize(blockSize int) LLMDConfig {
	c.MaxPrefixBlocks = scaleBlocks(c.MaxPrefixBlocks, blockSize)
	c.LRUCapacity = scaleBlocks(c.LRUCapacity, blockSize)
	return c
}

// scaleBlocks restates n blocks of 16 tokens in blocks of blockSize
// tokens (0 stays 0: no bound).
func scaleBlocks(n, blockSize int) int {
	if n <= 0 || blockSize <= 0 {
		return n
	}
	return max(n*llmdBlockTokens/blockSize, 1)
}
