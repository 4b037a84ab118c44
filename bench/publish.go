package bench

import (
	"time"

	"github.com/inference-cache/inference-cache/internal/vllmpub"
)

// Encoding is the msgpack form of the engines' KV-event batches
// (vllmpub.Encoding: positional as vLLM's msgspec writes array_like
// structs, or map).
type Encoding = vllmpub.Encoding

// Encodings.
const (
	EncodingPositional = vllmpub.EncodingPositional
	EncodingMap        = vllmpub.EncodingMap
)

// replayBufferBatches is how many recent batches each engine keeps for
// replay. vLLM keeps 10,000; a simulated batch carries up to a few hundred
// KiB of token ids, so the bench keeps fewer (a subscriber that misses more
// than this clears the replica, as it would with a real engine).
const replayBufferBatches = 256

// enginePublisher is one simulated engine's KV events on the wire: a
// vllmpub.Publisher (PUB and replay sockets) fed with the engine's
// admissions as vLLM batches. publishAdmission is called from one
// goroutine.
type enginePublisher struct {
	*vllmpub.Publisher
	seed uint64 // the engine's own block-hash seed (vLLM seeds per process)
	enc  *vllmpub.BatchEncoder
	hs   []uint64
	toks []uint32
}

// newEnginePublisher listens on random loopback ports. seed makes the
// engine's own block hashes (which the subscriber never trusts across
// processes) differ between engines.
func newEnginePublisher(enc Encoding, seed uint64) (*enginePublisher, error) {
	be, err := vllmpub.NewBatchEncoder(enc)
	if err != nil {
		return nil, err
	}
	p, err := vllmpub.New(vllmpub.Options{Replay: true, ReplayBuffer: replayBufferBatches})
	if err != nil {
		return nil, err
	}
	return &enginePublisher{Publisher: p, seed: seed, enc: be}, nil
}

// engineHash is the engine's own hash of a trace block.
func (p *enginePublisher) engineHash(hashID uint64) uint64 { return mix64(hashID ^ p.seed) }

// engineHashes returns the engine hashes of blocks in a reused slice.
func (p *enginePublisher) engineHashes(blocks []uint64) []uint64 {
	p.hs = p.hs[:0]
	for _, h := range blocks {
		p.hs = append(p.hs, p.engineHash(h))
	}
	return p.hs
}

// publishAdmission publishes one batch for an admission: BlockRemoved for
// the evicted blocks, then one BlockStored per stored run (with its parent
// block's engine hash, the run's token ids and block size 512). It returns
// the number of block hashes the batch names (the observation path's
// expected work) — 0 when there was nothing to publish.
func (p *enginePublisher) publishAdmission(blocks []uint64, a *Admission, now time.Time) (int, error) {
	nEv := len(a.Stored)
	if len(a.Evicted) > 0 {
		nEv++
	}
	if nEv == 0 {
		return 0, nil
	}
	e := p.enc
	e.Begin(float64(now.UnixNano())/1e9, nEv)
	count := 0
	if len(a.Evicted) > 0 {
		count += len(a.Evicted)
		e.BlockRemoved(p.engineHashes(a.Evicted), "GPU")
	}
	for _, r := range a.Stored {
		count += r.End - r.Start
		var parent uint64
		if r.Start > 0 {
			parent = p.engineHash(blocks[r.Start-1])
		}
		p.toks = p.toks[:0]
		for _, h := range blocks[r.Start:r.End] {
			p.toks = AppendBlockTokens(p.toks, h, TraceBlockTokens)
		}
		e.BlockStored(p.engineHashes(blocks[r.Start:r.End]), parent, r.Start > 0, p.toks, TraceBlockTokens, "GPU")
	}
	payload, err := e.End(0)
	if err != nil {
		return 0, err
	}
	if _, err := p.Publish(payload); err != nil {
		return 0, err
	}
	return count, nil
}
