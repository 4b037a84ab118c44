// Package command is the Raft log entry format of inference-cache (contract §6,
// 9): the commands a write becomes, their encoding, the framing of an
// entry (format, commands, checksum) and its decoding. It sits below fsm,
// snapshot and raftnode: raftnode encodes a write once with this package
// and hands the bytes on, fsm decodes and applies them, and snapshot
// stores the same protobuf messages (package fsmpb).
//
// There is one entry format, EntryFormat (2): protobuf commands of
// fsmpb.Command with ingest commands in the packed, columnar form
// (MarshalIngest). Entries of format 1, whose ingest commands carry
// protobuf events, are still read so that logs that hold them load; this
// package no longer writes them.
package command
