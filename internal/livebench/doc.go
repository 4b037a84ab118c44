// Package livebench is `inference-cache bench --live` (contract §12.7):
// the routing strategies compared on real processes and real requests.
// For each of the proxy's strategies it starts a fresh local stack of
// this binary's processes on loopback (a 3-node cluster, sim engines, the
// subscriber and one or more proxies; package localfleet), replays a
// Mooncake trace through it in real time (package loadgen), and reports
// TTFT, end-to-end latency and hit rates per strategy against the
// picker's targets. With --faults it runs the picker once under a fault
// schedule (leader kill, whole-cluster kill, engine kill, proxy drain)
// and measures what each fault did to the requests around it. Its
// fleets also serve LoRA adapters or disaggregated prefill and decode
// (--live-mode).
package livebench
