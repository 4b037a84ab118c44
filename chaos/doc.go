// Package chaos is the fault-injection harness: it starts a
// cluster of real `inference-cache server` processes (3 by default, 5 on
// request), runs a workload against them, injects faults, heals, and checks
// the invariants the design promises. The processes and the leader and
// digest waits are internal/proccluster's, shared with the dev command and
// the end-to-end tests; a node in a network namespace is the same command
// run behind `ip netns exec` (Spec.Prefix).
//
// Workload (workload.go): several ingest writers, each write with a unique
// request id and a unique 8-block chain, recording every acknowledged write
// with the applied index it got; LookupRoute readers against every node
// recording every error and latency; a SetCachePolicy/GetCachePolicy
// register workload (the register is the sloTightThresholdMs knob, which no
// lookup of the workload depends on).
//
// Faults (faults.go): SIGKILL the leader and restart it after a pause;
// SIGKILL a follower; SIGSTOP the leader longer than the election timeout,
// then SIGCONT; replace a follower by a node with an empty data directory
// (after removing its old server id through Cluster.RemoveServer, so the
// empty node is added back as a fresh voter by the leader instead of
// voting with a forgotten log); restart the whole cluster; and, when the
// harness runs as root with iproute2, network partitions (isolate the
// leader, isolate a follower, a majority/minority split) built from Linux
// network namespaces and veth pairs on a private bridge (netns.go). Without
// root or network namespaces the nodes run on 127.0.0.1 and partitions are
// skipped with a message saying why.
//
// Faults beyond crashes and cuts: a gossip-only partition between all
// pairs with a follower restarted during it, and a Raft-only partition of
// the leader (iptables rules on one port in the node namespaces;
// netfaults.go); a full data volume on the leader (each node's data
// directory on a size-limited tmpfs, filled with a ballast file; disk.go,
// nodefaults.go); a follower restarted with its wall clock ahead by more
// than the eviction TTL and made leader (the server's clock hook exists
// only in the chaos build, `go build -tags chaos`, which BuildBinary
// makes); and a flood of ingest streams that never read their responses
// (flood.go). TestChaosWAN runs the Raft timing profiles with every Raft
// connection through a userspace delay proxy (delayproxy.go: one-way
// delay, loss as retransmission stalls; this kernel has no netem).
//
// Checkers (check.go): every acknowledged ingest answers PREFIX_MATCH with
// its replica on every node after heal (LookupRoute with the exact chain);
// nodes that report the same applied index report the same digest, during
// the run and at the end; zero LookupRoute errors from a reachable node,
// and from a reachable node whose answer is not marked stale, nothing but
// PREFIX_MATCH for the chain seeded before the readers start;
// stale = true on a partitioned minority after maxStaleness; never two
// leaders in one term (Cluster.Status polled on every node); the policy
// register history is linearizable (porcupine; the HTML visualization is
// saved on failure); per fault, write unavailability and lookup p99;
// membership converged within 30 s of a gossip partition's heal; no
// sampled acknowledged write dropped or hidden under a skewed leader; a
// full-disk leader steps down, is not re-elected while full and is
// reported unhealthy; the flood leaves the other writers half their
// acknowledgements at no more than 10 times their median latency.
//
// The tests in this package that start processes run only when the CHAOS
// environment variable is set (`make chaos-smoke`, `make chaos`), so `go
// test ./...` stays fast. The long run writes its Report to CHAOS.md.
package chaos
