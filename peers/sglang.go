package peers

// SGLangConfig is the SGLang model gateway's cache_aware policy as its
// command line starts it.
type SGLangConfig struct {
	// CacheThreshold is --cache-threshold (0.3): the prefix match rate
	// above which the best-matching worker is taken.
	CacheThreshold float64
	// BalanceAbs and BalanceRel are --balance-abs-threshold (64) and
	// --balance-rel-threshold (1.5): the load is imbalanced when max −
	// min > BalanceAbs and max > min × BalanceRel.
	BalanceAbs int
	BalanceRel float64
	// TreeBlocks bounds the approximate tree per worker, in blocks:
	// --max-tree-size 2^26 characters at 16 tokens per block and 4
	// characters per token is 2^20 blocks.
	TreeBlocks int
}

// DefaultSGLangConfig is the command line's defaults.
func DefaultSGLangConfig() SGLangConfig {
	return SGLangConfig{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, TreeBlocks: 1 << 20}
}

// SGLangWorker is one candidate's inputs to the policy.
type SGLangWorker struct {
	// Load is the requests the router sent there that have not ended.
	Load int
	// MatchedTokens is the prompt prefix the router's tree holds for the
	// worker (its matched blocks × block size, at most the prompt);
	// TreeBlocks the tree's size for the worker.
	MatchedTokens, TreeBlocks int
}

// SGLang pick reasons.
const (
	// SGLangBalance: the load was imbalanced; the least loaded.
	SGLangBalance = "balance"
	// SGLangCacheHit: the best prefix match, above CacheThreshold.
	SGLangCacheHit = "cache-hit"
	// SGLangCacheMiss: no match above CacheThreshold; the smallest tree.
	SGLangCacheMiss = "cache-miss"
)

// SGLangPick is the cache_aware policy's choice among ws (at least one)
// for a prompt of promptTokens: when the load is imbalanced the least
// loaded (the first of equals); otherwise the highest MatchedTokens (the
// first of equals) when MatchedTokens / promptTokens > CacheThreshold,
// else the smallest tree (the first of equals). SGLang compares
// characters of the request text; here tokens of its prompt. The caller
// then adds the prompt's blocks to the chosen worker's tree, whichever
// branch chose it.
func SGLangPick(c SGLangConfig, promptTokens int, ws []SGLangWorker) (int, string) {
	lo, hi := ws[0].Load, ws[0].Load
	least := 0
	for i, w := range ws {
		if w.Load < lo {
			lo, least = w.Load, i
		}
		hi = max(hi, w.Load)
	}
	if hi-lo > c.BalanceAbs && float64(hi) > float64(lo)*c.BalanceRel {
		return least, SGLangBalance
	}
	best, smallest := 0, 0
	for i, w := range ws {
		if w.MatchedTokens > ws[best].MatchedTokens {
			best = i
		}
		if w.TreeBlocks < ws[smallest].TreeBlocks {
			smallest = i
		}
	}
	if promptTokens > 0 && float64(min(ws[best].MatchedTokens, promptTokens))/float64(promptTokens) > c.CacheThreshold {
		return best, SGLangCacheHit
	}
	return smallest, SGLangCacheMiss
}

// ForBlockSize is c with TreeBlocks (counted in 16-token blocks) restated
// in blocks of blockSize tokens.
func (c SGLangConfig) ForBlockSize(blockSize int) SGLangConfig {
	c.TreeBlocks = scaleBlocks(c.TreeBlocks, blockSize)
	return c
}
