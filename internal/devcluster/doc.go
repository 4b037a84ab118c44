// Package devcluster is `inference-cache dev` (contract §12.3): a local
// cluster of real server processes of this binary on loopback, with its
// serving fleet (sim engines, the subscriber, the routing proxy and a
// round-robin baseline proxy; package localfleet), demo traffic through
// the proxy, and a supervisor that reports a process that dies with the
// line of its log that says why and starts it again while the others
// keep serving. The live view (package topview) shows the nodes, the
// proxy's line, the demo's and the supervisor's lines.
package devcluster
