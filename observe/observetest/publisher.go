// Package observetest is a test kit for the observation path: fake
// engines publishing the vLLM KV-event wire format (the vllmpub publisher:
// live PUB socket and replay ROUTER socket) and helpers that encode
// batches, so tests can drive the real subscriber over loopback TCP
// without Python or an engine.
//
// It does not import observe, so observe's own tests can use it.
package observetest

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/inference-cache/inference-cache/internal/vllmpub"
)

// Publisher is a fake engine (vllmpub.Publisher): every Publish is
// numbered and kept for replay, like vLLM's ZmqEventPublisher, with the
// replay socket's reply layout, delay and silence settable for tests.
type Publisher = vllmpub.Publisher

// ReplyStyle is the frame layout of replay replies (vllmpub.ReplyStyle).
type ReplyStyle = vllmpub.ReplyStyle

// Reply styles.
const (
	ReplyTwoFrames   = vllmpub.ReplyTwoFrames   // [seq, payload]
	ReplyThreeFrames = vllmpub.ReplyThreeFrames // [topic, seq, payload]
)

// NewPublisher is a fake engine listening on random loopback ports;
// withReplay adds the replay socket. It keeps vLLM's 10,000 batches for
// replay. Close it when done.
func NewPublisher(withReplay bool) (*Publisher, error) {
	return vllmpub.New(vllmpub.Options{Replay: withReplay})
}

// NewConnectingPublisher is a fake engine in connect mode: its PUB socket
// connects to endpoint (a subscriber's listen socket) and every message
// carries topic (for example "kv@pod-a@qwen3-8b"). It dials in the
// background until it reaches endpoint, so it may start before the
// subscriber binds: call WaitSubscribed before publishing. withReplay
// adds the replay ROUTER, which binds a random loopback port like vLLM's.
// Close it when done.
func NewConnectingPublisher(endpoint, topic string, withReplay bool) (*Publisher, error) {
	return vllmpub.New(vllmpub.Options{Connect: endpoint, Topic: topic, Replay: withReplay})
}

// Batch encodes a positional batch [ts, events, rank?]; rank < 0 omits it.
func Batch(ts float64, rank int, events ...any) []byte {
	v := []any{ts, events}
	if rank >= 0 {
		v = append(v, rank)
	}
	return mustMarshal(v)
}

// MapBatch encodes a batch in map form; rank < 0 omits it.
func MapBatch(ts float64, rank int, events ...any) []byte {
	v := map[string]any{"ts": ts, "events": events}
	if rank >= 0 {
		v["data_parallel_rank"] = rank
	}
	return mustMarshal(v)
}

// Stored is a positional BlockStored event with vLLM's fields up to
// lora_name; extra appends trailing fields (extra_keys, group_idx, …).
func Stored(hashes []any, parent any, tokens []uint32, blockSize int, loraID, medium, loraName any, extra ...any) []any {
	return append([]any{"BlockStored", hashes, parent, tokens, blockSize, loraID, medium, loraName}, extra...)
}

// Removed is a positional BlockRemoved event; extra appends group_idx.
func Removed(hashes []any, medium any, extra ...any) []any {
	return append([]any{"BlockRemoved", hashes, medium}, extra...)
}

// Cleared is a positional AllBlocksCleared event.
func Cleared() []any { return []any{"AllBlocksCleared"} }

// Hashes converts uint64 engine hashes to the []any the encoders take.
func Hashes(hs ...uint64) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h
	}
	return out
}

// Tokens returns n tokens start, start+1, ….
func Tokens(start, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(start + i)
	}
	return t
}

func mustMarshal(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
