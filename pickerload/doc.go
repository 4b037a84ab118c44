// Package pickerload holds the in-flight load that pickers (gateway
// replicas) report to a node, as soft state (contract §5.11): in memory
// only, never through the Raft log, gone when the reporting picker stops.
//
// A picker's report (Report) replaces everything held for it: per replica,
// the requests it routed there that have not produced their first token,
// their uncached prompt tokens, and the requests it routed there that have
// not finished. A report is ordered by its sequence (an older or repeated
// one is ignored) and expires 2 of the picker's report intervals after it
// arrived, measured on the node's own clock (so the clocks of picker and
// node never need to agree). The store holds at most a bounded number of
// (picker, replica) entries; a report that would pass the bound is refused
// whole and nothing already held is lost.
//
// Reads (View.Others) sum, for one replica, the unexpired reports of every
// picker but the asker, without taking a lock: each replica's
// contributions are an immutable slice published through an atomic
// pointer, rebuilt by the (serialized) writers. A lookup reads the clock
// once (Store.At) and then sums as many replicas as it answers for.
//
// The package is pure apart from the clock it is given (Config.Now): no
// I/O and no goroutines of its own. The node that owns a Store calls
// Sweep periodically to drop expired reports (reads ignore them anyway).
package pickerload
