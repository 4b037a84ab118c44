// Package localfleet lays out and describes a local serving fleet beside
// a cluster, every part a process of this same binary on loopback: sim
// engines publishing vLLM KV events, the subscriber that feeds them to
// the cluster, and routing proxies in front of the engines. The dev
// command and bench --live start their fleets from the same process
// specs, ports and tokenizer copy (contract §12.3, §12.7).
package localfleet
