// Package snapshot is the on-disk snapshot format of inference-cache (contract §8,
// 13): a BoltDB (bbolt) file framed for streaming, used for Raft snapshots,
// operator backups and whole-cluster restores.
//
// A snapshot stream is
//
//	header  24 bytes: magic "ICSNAP01" | format version (uint32 BE) | 0 (uint32) | body length (uint64 BE)
//	body    the bbolt file, body-length bytes
//	trailer 16 bytes: magic "ICSNEND0" | XXH3-64 of the body (uint64 BE)
//
// The framing lets a reader detect truncation (the body or trailer ends
// early: ErrTruncated) and corruption in transit (ErrCorrupt) before bbolt
// ever maps the file.
//
// The frame's XXH3 is not a MAC: a crafted body with a matching checksum
// reaches bbolt, and bbolt trusts the file's page graph. A branch element
// pointing back at its own page or an ancestor makes bbolt's cursor
// descend forever (its stack grows until the process runs out of memory,
// a fatal error no recover catches), and a deep enough chain overflows
// the goroutine stack; bbolt's tx.Check has no cycle detection either.
// So before bbolt opens the body, Read and Inspect walk its page graph
// themselves from bbolt's documented on-disk layout (pagecheck.go): the
// meta page bbolt would use, then every bucket tree with a visited set,
// refusing as ErrCorrupt (naming the page) a page reached twice, a page id
// beyond the high-water mark or the file, a header that names another
// page, wrong page flags, an element, key or value outside its page, a
// malformed inline bucket, or a tree or bucket nesting deeper than a
// fixed bound. The walk reads only page, element and bucket headers, so
// its cost is a small fraction of a Read (BenchmarkRead_PageCheck).
// Memory faults and bbolt's own panics on what the walk does not cover
// (guard.go) still become ErrCorrupt.
//
// Inside the bbolt file:
//
//	meta        format_version, applied_index, applied_term, created_unix_ms,
//	            policy (fsmpb.Policy), digest, sizes, chunks, checksum
//	blocks      key chunk number (uint64 BE) → a chunk of block records
//	partitions  key partition number (uint32 BE) → 4 length-prefixed strings
//	replicas    key replica number (uint32 BE) → replica id
//	stats       key sequence (uint32 BE) → fsmpb.ReplicaStats
//	dedup       key "window" → fsmpb.Dedup (the FSM's de-duplication window)
//
// Fields added to those protobuf records keep the format version: a record
// from an older snapshot reads them as 0 (the engine's queue in a stats
// record, for one), and a 0 digests as the older release did, so an old
// backup still verifies against the digest in its meta.
//
// Block records are packed into chunks of about ChunkBytes so a 10 M
// residency snapshot is a few thousand bbolt puts, not millions. The meta
// checksum is XXH3-64 over every bucket's keys and values in a fixed bucket
// order plus the meta keys other than itself; it is checked before anything
// is loaded.
//
// Write persists a point-in-time Source (an *index.View); Read verifies and
// feeds a Builder (an *index.Builder); Inspect verifies and returns Meta only.
//
// Both directions are two-stage pipelines so the single-threaded index
// work overlaps the rest: Write encodes records on the goroutine that
// walks the view while a writer goroutine puts finished chunks into bbolt
// and commits; Read decodes chunks on a goroutine that owns the blocks
// cursor while the caller's goroutine feeds the Builder. Replica ids are
// numbered through a small cache keyed by the id string's data pointer
// (the index hands out the same few strings for millions of residencies).
package snapshot
