// Package fsmpb is the protobuf schema of the Raft log's entries
// (command.proto, generated into command.pb.go; an internal encoding, not
// a public contract, whose field numbers are append-only) and the
// hand-written conversions between it and the index and policy types,
// which sort map keys so that equal values encode to equal bytes.
package fsmpb
