// Package vllmpub is a KV-event publisher in vLLM's wire format, in Go: a
// ZMQ PUB socket sending [topic, seq (8 bytes big-endian), msgpack batch]
// and, optionally, a ROUTER replay socket answering [identity, "", start
// seq] with every buffered batch from start and an end marker (seq −1),
// as vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py) does. The
// PUB socket either listens on a random loopback port or connects to a
// subscriber's listen socket.
//
// BatchEncoder writes EventBatch, BlockStored and BlockRemoved as vLLM's
// msgspec encoder does: positional arrays for array_like Structs, maps in
// field declaration order otherwise.
//
// Both the benchmark's simulated engines (bench) and the observation
// path's test kit (observe/observetest) publish through it, so what the
// subscriber is tested against is what the benchmark sends. It imports
// neither observe nor bench.
package vllmpub
