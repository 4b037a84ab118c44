package engine

import (
	"errors"
	"fmt"

	"github.com/inference-cache/inference-cache/fingerprint"
)

// Defaults of Config: the engine speeds both simulations start from.
const (
	// DefaultPrefillTPS is the prefill speed in uncached prompt tokens per
	// second.
	DefaultPrefillTPS = 10000
	// DefaultDecodeTPS is each running request's decode speed in output
	// tokens per second.
	DefaultDecodeTPS = 40
)

// Config configures a Model.
type Config struct {
	// BlockSize is the tokens per KV block (0 = fingerprint.DefaultBlockSize,
	// 1..fingerprint.MaxBlockSize); only full blocks are cached, as in vLLM.
	BlockSize int
	// KVBlocks is the KV capacity in blocks (required, ≥ 1), shared by the
	// cached prefixes and the running requests.
	KVBlocks int
	// PrefillTPS is the prefill speed in uncached prompt tokens per second
	// (0 = DefaultPrefillTPS).
	PrefillTPS float64
	// DecodeTPS is each running request's decode speed in output tokens
	// per second, however many decode at once (0 = DefaultDecodeTPS).
	DecodeTPS float64
	// EachToken emits a Token event for every decode step (a streaming
	// server needs them); without it a decode is one step, at its last
	// token.
	EachToken bool
	// ClipOversize runs a request needing more than KVBlocks blocks with
	// its prompt blocks cut to the leading ones that fit instead of
	// refusing it (the bench's engines, whose capacity is a scaled-down
	// model knob rather than a real engine's memory).
	ClipOversize bool
	// Gate, when set, may pass waiting requests over and add time before
	// a prefill (simengine's LoRA adapters); nil = plain FCFS.
	Gate Gate
}

// Fill sets the defaults and checks the settings; errors name the field.
func (c *Config) Fill() error {
	if c.BlockSize == 0 {
		c.BlockSize = fingerprint.DefaultBlockSize
	}
	if c.BlockSize < 1 || c.BlockSize > fingerprint.MaxBlockSize {
		return fmt.Errorf("engine: block size %d: want 1 to %d", c.BlockSize, fingerprint.MaxBlockSize)
	}
	if c.KVBlocks < 1 {
		return fmt.Errorf("engine: %d KV blocks: need at least 1", c.KVBlocks)
	}
	if c.PrefillTPS == 0 {
		c.PrefillTPS = DefaultPrefillTPS
	}
	if c.DecodeTPS == 0 {
		c.DecodeTPS = DefaultDecodeTPS
	}
	if !(c.PrefillTPS > 0) || !(c.DecodeTPS > 0) {
		return fmt.Errorf("engine: prefill %v and decode %v tokens/s must be positive", c.PrefillTPS, c.DecodeTPS)
	}
	return nil
}

// Gate is a scheduling policy beside FCFS, called synchronously by the
// model.
type Gate interface {
	// Admissible reports whether waiting request id may start now; the
	// first admissible request in arrival order is the one considered.
	Admissible(id ID) bool
	// Starting is called as request id's prefill starts; it returns the
	// seconds added before the prefill (an adapter's load, say).
	Starting(id ID) float64
	// Stopped is called when a started request stops running (it ended
	// or was cancelled).
	Stopped(id ID)
}

// ErrTooLong is returned (wrapped) by Submit for a request that needs
// more KV blocks than the engine has.
var ErrTooLong = errors.New("engine: request needs more KV blocks than the engine has")

// CachedTokens is the prompt tokens a prefill finds cached when the
// leading run of cachedBlocks of its full blocks of blockSize tokens is in
// the cache: vLLM always computes the prompt's last token, so at most
// (promptTokens − 1) / blockSize blocks count.
func CachedTokens(cachedBlocks, promptTokens, blockSize int) int {
	return min(cachedBlocks, max(0, (promptTokens-1)/blockSize)) * blockSize
}

// ReserveBlocks is the blocks a request reserves beside its pinned full
// prompt blocks: its partial last prompt block and its output,
// ceil((promptTokens − fullBlocks × blockSize + outputTokens) / blockSize).
func ReserveBlocks(promptTokens, fullBlocks, outputTokens, blockSize int) int {
	return (promptTokens - fullBlocks*blockSize + outputTokens + blockSize - 1) / blockSize
}

// PrefillSeconds is the modelled prefill of a request of promptTokens
// with cachedTokens cached: its uncached tokens at PrefillTPS, or with
// pullPerBlock > 0 its uncached blocks (the partial last one included) at
// pullPerBlock seconds each.
func (c *Config) PrefillSeconds(promptTokens, cachedTokens int, pullPerBlock float64) float64 {
	uncached := promptTokens - cachedTokens
	if pullPerBlock > 0 {
		return float64((uncached+c.BlockSize-1)/c.BlockSize) * pullPerBlock
	}
	return float64(uncached) / c.PrefillTPS
}

// DecodeSeconds is the time from a request's first output token to its
// last: (outputTokens − 1) / DecodeTPS (0 for one token or none).
func (c *Config) DecodeSeconds(outputTokens int) float64 {
	return float64(max(0, outputTokens-1)) / c.DecodeTPS
}
