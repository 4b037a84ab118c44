// Package api is the gRPC face of one inference-cache node (contract §5,
// §9, §10): the InferenceCache and Cluster services over the node's local
// index (reads) and its raftnode (writes), with validation and limits,
// write admission, fail-open LookupRoute, authentication and the mapping
// of errors to gRPC codes.
//
// Reads never leave the node: LookupRoute answers from the local copy of
// the index. Writes are validated here, then handed to raftnode, which
// puts them through the Raft log.
package api
