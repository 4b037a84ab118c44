// Package observe is the observation path (contract §6 and 12): it
// subscribes to the KV-cache events of vLLM and SGLang engines over ZMQ,
// translates them into content-fingerprinted BlockEvents, and writes them to
// the cluster with Ingest through the client SDK; it also scrapes each
// engine's Prometheus metrics into ReportReplicaStats.
//
// Data flows one way through small, separately tested parts:
//
//	SUB socket ──frames──▶ sequencer ──batch──▶ Decoder ──events──▶ translator
//	  (engine.go)       (sequencer.go)          (decode.go)        (translate.go)
//	                         ▲ replay (DEALER)                          │
//	                                                     BlockEvents    ▼
//	                                          Forwarder (forwarder.go) ──▶ Sink
//
// The sequencer and translator are pure (no clock, no I/O); the stream loop
// in engine.go owns the sockets; the Subscriber (subscriber.go) starts one
// stream per engine socket and handles configuration reloads. Engines that
// connect to the subscriber instead (listen mode, listen.go) share one
// bound SUB socket per data-parallel rank, whose listener hands each
// message to the stream its topic names; the streams are the same. The Sink
// interface (sink.go) is all observe knows of the cluster — it never
// imports the server packages.
//
// See DESIGN.md for the cases handled (restart, gap and replay, unknown
// parents, block-size mismatch, DP ranks, LoRA partitions, multimodal
// blocks, cache_salt, hybrid-model groups, locality, media, pages smaller
// than blocks (reblock.go), rate-limited drop logs…) and the trade-offs.
package observe
