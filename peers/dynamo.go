package peers

import (
	"math"
	"math/rand/v2"
)

// DynamoConfig is Dynamo's KV router selection (KvRouterConfig).
type DynamoConfig struct {
	// OverlapWeight is overlap_score_weight (--router-kv-overlap-score-weight):
	// the weight of the prefill blocks against the decode blocks.
	OverlapWeight float64
	// Temperature is router_temperature (--router-temperature): 0 takes
	// the lowest logit; above 0 samples a softmax over the logits.
	Temperature float64
	// BlockSize is the engines' KV block size in tokens.
	BlockSize int
}

// DefaultDynamoConfig is Dynamo's default (overlap weight 1, temperature
// 0) at blockSize tokens per block.
func DefaultDynamoConfig(blockSize int) DynamoConfig {
	return DynamoConfig{OverlapWeight: 1, BlockSize: blockSize}
}

// DynamoSlots is one Dynamo router's active-sequence tracking
// (ActiveSequences, one per worker): for every request it routed and that
// has not ended, its worker, its blocks and, until its first token, its
// uncached prompt tokens. With router_replica_sync every router instance
// applies every instance's Add, PrefillDone and Free, so they share one
// state. Not safe for concurrent use.
type DynamoSlots struct {
	blockSize int
	workers   map[string]*dynamoWorker
	reqs      map[uint64]*dynamoReq
}

type dynamoWorker struct {
	blocks map[uint64]int // active blocks: how many active requests hold each
	tokens int            // active prefill tokens
}

type dynamoReq struct {
	worker  string
	blocks  []uint64
	prefill int // uncached tokens until the first token; 0 after
}

// NewDynamoSlots returns an empty tracker for blockSize-token blocks
// (at least 1).
func NewDynamoSlots(blockSize int) *DynamoSlots {
	return &DynamoSlots{blockSize: max(blockSize, 1), workers: map[string]*dynamoWorker{}, reqs: map[uint64]*dynamoReq{}}
}

func (s *DynamoSlots) worker(w string) *dynamoWorker {
	x := s.workers[w]
	if x == nil {
		x = &dynamoWorker{blocks: map[uint64]int{}}
		s.workers[w] = x
	}
	return x
}

// NewTokens is the prompt tokens a worker with overlap cached leading
// blocks still prefills: isl − overlap × block size, at least 0
// (new_tokens).
func (s *DynamoSlots) NewTokens(isl, overlap int) int { return max(isl-overlap*s.blockSize, 0) }

// Add records request id routed to worker: blocks are its prompt's full
// blocks (the slice is copied), isl its prompt tokens and overlap the
// leading blocks the indexer said the worker held (add_request). A
// request id already active is ignored, as Dynamo does.
func (s *DynamoSlots) Add(id uint64, worker string, blocks []uint64, isl, overlap int) {
	if _, ok := s.reqs[id]; ok {
		return
	}
	w := s.worker(worker)
	r := &dynamoReq{worker: worker, blocks: append([]uint64(nil), blocks...), prefill: s.NewTokens(isl, overlap)}
	w.tokens += r.prefill
	for _, b := range r.blocks {
		w.blocks[b]++
	}
	s.reqs[id] = r
}

// PrefillDone records request id's first token: its prefill tokens leave
// the worker's load (mark_prefill_completed). Unknown ids are ignored.
func (s *DynamoSlots) PrefillDone(id uint64) {
	r := s.reqs[id]
	if r == nil || r.prefill == 0 {
		return
	}
	s.workers[r.worker].tokens -= r.prefill
	r.prefill = 0
}

// Free records request id's end: its prefill (if still counted) and its
// blocks leave the worker (free). Unknown ids are ignored.
func (s *DynamoSlots) Free(id uint64) {
	r := s.reqs[id]
	if r == nil {
		return
	}
	s.PrefillDone(id)
	w := s.workers[r.worker]
	for _, b := range r.blocks {
		if w.blocks[b]--; w.blocks[b] <= 0 {
			delete(w.blocks, b)
		}
	}
	delete(s.reqs, id)
}

// Active is how many requests are tracked (added, not freed).
func (s *DynamoSlots) Active() int { return len(s.reqs) }

// Potential is worker's load if a request of blocks (full-block hashes),
// isl prompt tokens and overlap cached leading blocks were added there
// (potential_blocks_and_tokens): decodeBlocks = the distinct blocks of
// the worker's active requests plus the request's blocks not among them;
// prefillTokens = the active requests' prefill tokens plus the request's
// new tokens.
func (s *DynamoSlots) Potential(worker string, blocks []uint64, isl, overlap int) (decodeBlocks, prefillTokens int) {
	w := s.workers[worker]
	if w == nil {
		return len(blocks), s.NewTokens(isl, overlap)
	}
	fresh := 0
	for _, b := range blocks {
		if _, ok := w.blocks[b]; !ok {
			fresh++
		}
	}
	return len(w.blocks) + fresh, w.tokens + s.NewTokens(isl, overlap)
}

// DynamoLogit is a worker's cost, lower is better: OverlapWeight ×
// prefillTokens / BlockSize + decodeBlocks, with Potential's terms.
func DynamoLogit(c DynamoConfig, decodeBlocks, prefillTokens int) float64 {
	return c.OverlapWeight*float64(prefillTokens)/float64(max(c.BlockSize, 1)) + float64(decodeBlocks)
}

// DynamoSelect picks among logits (one per candidate, at least one) as
// Dynamo's DefaultWorkerSelector does. Temperature 0: the lowest logit;
// ties go to the smallest tree (treeSizes: the blocks the indexer holds
// per candidate; nil when unknown), then uniformly at random. Above 0:
// a sample of the softmax of −(logit / (max − min)) / Temperature
// (uniform when all logits are equal). rng draws the randomness.
func DynamoSelect(c DynamoConfig, logits []float64, treeSizes []int, rng *rand.Rand) int {
	if c.Temperature > 0 {
		return dynamoSoftmax(logits, c.Temperature, rng.Float64())
	}
	low := math.Inf(1)
	for _, v := range logits {
		low = min(low, v)
	}
	var ties [16]int
	mins := ties[:0]
	for i, v := range logits {
		if v == low {
			mins = append(mins, i)
		}
	}
	if len(mins) > 1 && treeSizes != nil {
		small, same := mins[0], true
		for _, i := range mins[1:] {
			if treeSizes[i] != treeSizes[mins[0]] {
				same = false
			}
			if treeSizes[i] < treeSizes[small] {
				small = i
			}
		}
		if !same {
			return small
		}
	}
	return mins[rng.IntN(len(mins))]
}

// dynamoSoftmax samples index i with probability ∝ exp(s_i − max s),
// s_i = −(logit_i / range) / temperature, by the uniform draw u in [0, 1).
func dynamoSoftmax(logits []float64, temperature, u float64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range logits {
		lo, hi = min(lo, v), max(hi, v)
	}
	n := len(logits)
	if lo == hi {
		return min(int(u*float64(n)), n-1)
	}
	r := hi - lo
	top := -(lo / r) / temperature // the largest scaled value
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(-(v/r)/temperature - top)
	}
	acc := 0.0
	for i, v := range logits {
		acc += math.Exp(-(v/r)/temperature-top) / sum
		if u <= acc {
			return i
		}
	}
	return n - 1
}
