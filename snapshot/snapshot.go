package snapshot

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/zeebo/xxh3"
	"go.etcd.io/bbolt"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// Format constants.
const (
	// FormatVersion is the version this binary writes and the newest it
	// reads; a stream or meta bucket with a larger version fails with
	// ErrVersion.
	FormatVersion uint32 = 1
	// ChunkBytes is the target size of one blocks-bucket value: large
	// enough that 10 M residencies are a few thousand bbolt puts, small
	// enough that a chunk is cheap to hold and decode.
	ChunkBytes = 256 << 10
	// chunksPerTx bounds the dirty pages one bbolt write transaction holds
	// (~16 MiB) so Persist memory stays flat whatever the index size.
	chunksPerTx = 64
	headerLen   = 24
	trailerLen  = 16
	// chunkHeadroom is reserved in front of each chunk buffer for the
	// record count (a uvarint), so a chunk is put without copying.
	chunkHeadroom = binary.MaxVarintLen64
	// maxBody refuses absurd header lengths (a corrupt header) before
	// copying: 64 GiB.
	maxBody = 64 << 30
)

var (
	headerMagic  = [8]byte{'I', 'C', 'S', 'N', 'A', 'P', '0', '1'}
	trailerMagic = [8]byte{'I', 'C', 'S', 'N', 'E', 'N', 'D', '0'}

	bucketMeta       = []byte("meta")
	bucketBlocks     = []byte("blocks")
	bucketPartitions = []byte("partitions")
	bucketReplicas   = []byte("replicas")
	bucketStats      = []byte("stats")
	bucketDedup      = []byte("dedup")
	// contentBuckets is the fixed order the checksum covers.
	contentBuckets = [][]byte{bucketBlocks, bucketPartitions, bucketReplicas, bucketStats, bucketDedup}

	keyVersion  = []byte("format_version")
	keyIndex    = []byte("applied_index")
	keyTerm     = []byte("applied_term")
	keyCreated  = []byte("created_unix_ms")
	keyPolicy   = []byte("policy")
	keyDigest   = []byte("digest")
	keySizes    = []byte("sizes")
	keyChunks   = []byte("chunks")
	keyChecksum = []byte("checksum")
	keyWindow   = []byte("window")
)

// Sentinel errors; every error from Read, Inspect and Verify that concerns
// the input wraps exactly one of them and says where the problem is.
var (
	// ErrCorrupt: the bytes are damaged (bad magic, checksum mismatch, a
	// record that does not decode).
	ErrCorrupt = errors.New("snapshot corrupt")
	// ErrTruncated: the stream ended before the header, body or trailer was
	// complete.
	ErrTruncated = errors.New("snapshot truncated")
	// ErrVersion: the snapshot was written by a newer format version than
	// this binary reads (or an invalid version 0).
	ErrVersion = errors.New("snapshot format version unsupported")
)

// Meta is the snapshot's meta bucket plus what the reader measured.
type Meta struct {
	// FormatVersion of the file (1..FormatVersion).
	FormatVersion uint32
	// AppliedIndex and AppliedTerm are the last Raft log entry the FSM had
	// applied when the view was taken.
	AppliedIndex uint64
	AppliedTerm  uint64
	// CreatedAt is the wall-clock time Persist started (informational).
	CreatedAt time.Time
	// Policy is the replicated policy in force, with its Version.
	Policy policy.Policy
	// Digest is index.Index.Digest at the view.
	Digest uint64
	// Sizes counts what the index held.
	Sizes index.Sizes
	// Chunks is the number of blocks-bucket chunks.
	Chunks uint64
	// Checksum is the XXH3-64 content checksum stored in meta.
	Checksum uint64
	// StreamBytes is the framed stream length (header+body+trailer).
	StreamBytes int64
}

// Source is what Write persists; *index.View implements it.
type Source interface {
	Blocks(fn func(index.BlockRecord) error) error
	Stats(fn func(index.ReplicaStats) error) error
	Policy() policy.Policy
	Digest() uint64
	Sizes() index.Sizes
}

// Builder receives a verified snapshot's records; *index.Builder
// implements it. AddBlock is called from one goroutine; r.Residents is
// only valid during the call (Read reuses its backing array), so a
// Builder that keeps it must copy it.
type Builder interface {
	AddBlock(r index.BlockRecord) error
	AddStats(s index.ReplicaStats) error
}

// Write persists src as a framed bbolt stream to w. The bbolt file is built
// in a temporary file in tmpDir ("" = os.TempDir()) and removed afterwards.
// appliedIndex/appliedTerm and dedup (opaque, stored in the dedup bucket)
// come from the FSM. It returns the stream length in bytes.
func Write(w io.Writer, tmpDir string, appliedIndex, appliedTerm uint64, src Source, dedup []byte) (int64, error) {
	return WriteContext(context.Background(), w, tmpDir, appliedIndex, appliedTerm, src, dedup)
}

// WriteContext is Write that stops early once ctx is done: it checks ctx
// between chunks of blocks (ChunkBytes each) and between writes to w, and
// then returns an error wrapping ctx.Err(), having written part of the
// stream or none of it (the caller discards it: a raft sink is
// cancelled). A large snapshot takes minutes on a busy node; a node that
// shuts down must not wait for it.
func WriteContext(ctx context.Context, w io.Writer, tmpDir string, appliedIndex, appliedTerm uint64, src Source, dedup []byte) (int64, error) {
	f, err := os.CreateTemp(tmpDir, "inference-cache-snapshot-*.db")
	if err != nil {
		return 0, fmt.Errorf("snapshot: create temp file: %w", err)
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)

	if err := writeDB(ctx, path, appliedIndex, appliedTerm, src, dedup); err != nil {
		return 0, err
	}
	return frame(ctxWriter{ctx, w}, path)
}

// ctxWriter fails every Write once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// checksum is XXH3-64 over the content buckets (fixed order) and the meta
// keys other than the checksum itself; lengths are framed so moving bytes
// between keys and values changes the sum.
func checksum(tx *bbolt.Tx) (uint64, error) {
	h := xxh3.New()
	var lb [8]byte
	put := func(b []byte) {
		binary.LittleEndian.PutUint64(lb[:], uint64(len(b)))
		h.Write(lb[:])
		h.Write(b)
	}
	for _, name := range append(append([][]byte(nil), contentBuckets...), bucketMeta) {
		b := tx.Bucket(name)
		if b == nil {
			return 0, fmt.Errorf("%w: bucket %q missing", ErrCorrupt, name)
		}
		put(name)
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if string(name) == string(bucketMeta) && string(k) == string(keyChecksum) {
				continue
			}
			put(k)
			put(v)
		}
	}
	return h.Sum64(), nil
}

// frame streams header, the file at path and the trailer to w.
func frame(w io.Writer, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("snapshot: reopen %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("snapshot: stat %s: %w", path, err)
	}
	var hdr [headerLen]byte
	copy(hdr[:8], headerMagic[:])
	binary.BigEndian.PutUint32(hdr[8:12], FormatVersion)
	binary.BigEndian.PutUint64(hdr[16:24], uint64(st.Size()))
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("snapshot: write header: %w", err)
	}
	h := xxh3.New()
	n, err := io.Copy(io.MultiWriter(bw, h), f)
	if err != nil {
		return 0, fmt.Errorf("snapshot: write body at byte %d: %w", headerLen+n, err)
	}
	var tr [trailerLen]byte
	copy(tr[:8], trailerMagic[:])
	binary.BigEndian.PutUint64(tr[8:], h.Sum64())
	if _, err := bw.Write(tr[:]); err != nil {
		return 0, fmt.Errorf("snapshot: write trailer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("snapshot: flush: %w", err)
	}
	return headerLen + n + trailerLen, nil
}
