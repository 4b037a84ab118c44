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
	"unsafe"

	"github.com/zeebo/xxh3"
	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
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

func writeDB(ctx context.Context, path string, appliedIndex, appliedTerm uint64, src Source, dedup []byte) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("snapshot: open temp bbolt %s: %w", path, err)
	}
	defer db.Close()

	tx, err := db.Begin(true)
	if err != nil {
		return fmt.Errorf("snapshot: begin: %w", err)
	}
	defer func() {
		if tx != nil {
			tx.Rollback()
		}
	}()
	for _, name := range append([][]byte{bucketMeta}, contentBuckets...) {
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("snapshot: create bucket %s: %w", name, err)
		}
	}

	// Blocks are exported by the index (single-threaded: a sort and a walk)
	// and encoded on this goroutine, while a writer goroutine puts finished
	// chunks into bbolt and commits every chunksPerTx; the two overlap.
	// The write transaction belongs to the writer goroutine until it
	// returns (handed over through channels, never used concurrently).
	var parts []index.Partition
	partIdx := map[index.Partition]uint32{}
	var repls replicaInterner
	var chunkNo uint64

	type chunkBuf struct {
		b    []byte // chunkHeadroom bytes reserved for the record count
		recs uint64
	}
	full := make(chan *chunkBuf, 4)
	free := make(chan *chunkBuf, chunksPerTx+8)
	writerDone := make(chan error, 1)
	go func() {
		var werr error
		var inTx []*chunkBuf // values bbolt references until commit
		var key [8]byte
		for c := range full {
			if werr != nil {
				continue // drain
			}
			n := binary.PutUvarint(key[:], c.recs)
			val := c.b[chunkHeadroom-n:]
			copy(val, key[:n])
			b := tx.Bucket(bucketBlocks)
			b.FillPercent = 1.0
			k := binary.BigEndian.AppendUint64(nil, chunkNo)
			if err := b.Put(k, val); err != nil {
				werr = fmt.Errorf("snapshot: put chunk %d: %w", chunkNo, err)
				continue
			}
			inTx = append(inTx, c)
			chunkNo++
			if chunkNo%chunksPerTx == 0 {
				if err := tx.Commit(); err != nil {
					tx = nil
					werr = fmt.Errorf("snapshot: commit at chunk %d: %w", chunkNo, err)
					continue
				}
				if tx, werr = db.Begin(true); werr != nil {
					tx = nil
					werr = fmt.Errorf("snapshot: begin: %w", werr)
					continue
				}
				for _, c := range inTx {
					select {
					case free <- c:
					default:
					}
				}
				inTx = inTx[:0]
			}
		}
		writerDone <- werr
	}()
	newChunk := func() *chunkBuf {
		select {
		case c := <-free:
			c.b, c.recs = c.b[:chunkHeadroom], 0
			return c
		default:
			return &chunkBuf{b: make([]byte, chunkHeadroom, chunkHeadroom+ChunkBytes+4096)}
		}
	}
	cur := newChunk()
	err = src.Blocks(func(r index.BlockRecord) error {
		pi, ok := partIdx[r.Partition]
		if !ok {
			pi = uint32(len(parts))
			partIdx[r.Partition] = pi
			parts = append(parts, r.Partition)
		}
		chunk := cur.b
		chunk = binary.AppendUvarint(chunk, uint64(pi))
		chunk = binary.LittleEndian.AppendUint64(chunk, r.Hash)
		chunk = binary.AppendUvarint(chunk, uint64(r.Tokens))
		chunk = binary.AppendUvarint(chunk, uint64(r.CumTokens))
		chunk = binary.AppendUvarint(chunk, r.Access)
		chunk = binary.AppendUvarint(chunk, uint64(len(r.Residents)))
		for _, res := range r.Residents {
			chunk = binary.AppendUvarint(chunk, uint64(repls.id(res.ReplicaID)))
			chunk = binary.AppendVarint(chunk, res.LastSeenMs)
		}
		cur.b = chunk
		cur.recs++
		if len(chunk)-chunkHeadroom >= ChunkBytes {
			if err := ctx.Err(); err != nil {
				return err
			}
			select {
			case full <- cur:
			case werr := <-writerDone:
				writerDone <- werr // the writer stopped early: report below
				return errWriterStopped
			}
			cur = newChunk()
		}
		return nil
	})
	if err == nil && cur.recs > 0 {
		full <- cur
	}
	close(full)
	werr := <-writerDone
	if werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("snapshot: write blocks: %w", err)
	}

	var k4 [4]byte
	pb := tx.Bucket(bucketPartitions)
	pb.FillPercent = 1.0
	for i, p := range parts {
		binary.BigEndian.PutUint32(k4[:], uint32(i))
		var v []byte
		for _, s := range []string{p.Scheme, p.Model, p.Tenant, p.Adapter} {
			v = binary.AppendUvarint(v, uint64(len(s)))
			v = append(v, s...)
		}
		if err := pb.Put(append([]byte(nil), k4[:]...), v); err != nil {
			return fmt.Errorf("snapshot: put partition %d: %w", i, err)
		}
	}
	rb := tx.Bucket(bucketReplicas)
	rb.FillPercent = 1.0
	for i, id := range repls.ids {
		binary.BigEndian.PutUint32(k4[:], uint32(i))
		if err := rb.Put(append([]byte(nil), k4[:]...), []byte(id)); err != nil {
			return fmt.Errorf("snapshot: put replica %d: %w", i, err)
		}
	}
	sb := tx.Bucket(bucketStats)
	sb.FillPercent = 1.0
	var nStats uint32
	err = src.Stats(func(s index.ReplicaStats) error {
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(fsmpb.StatsToPB(s))
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint32(k4[:], nStats)
		nStats++
		return sb.Put(append([]byte(nil), k4[:]...), v)
	})
	if err != nil {
		return fmt.Errorf("snapshot: write stats: %w", err)
	}
	if err := tx.Bucket(bucketDedup).Put(keyWindow, dedup); err != nil {
		return fmt.Errorf("snapshot: write dedup: %w", err)
	}

	pol, err := proto.MarshalOptions{Deterministic: true}.Marshal(fsmpb.PolicyToPB(src.Policy()))
	if err != nil {
		return fmt.Errorf("snapshot: encode policy: %w", err)
	}
	sz := src.Sizes()
	var sizes []byte
	for _, n := range []int{sz.Partitions, sz.Blocks, sz.Residencies, sz.Replicas} {
		sizes = binary.BigEndian.AppendUint64(sizes, uint64(n))
	}
	mb := tx.Bucket(bucketMeta)
	for _, kv := range []struct {
		k, v []byte
	}{
		{keyVersion, binary.BigEndian.AppendUint32(nil, FormatVersion)},
		{keyIndex, binary.BigEndian.AppendUint64(nil, appliedIndex)},
		{keyTerm, binary.BigEndian.AppendUint64(nil, appliedTerm)},
		{keyCreated, binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixMilli()))},
		{keyPolicy, pol},
		{keyDigest, binary.BigEndian.AppendUint64(nil, src.Digest())},
		{keySizes, sizes},
		{keyChunks, binary.BigEndian.AppendUint64(nil, chunkNo)},
	} {
		if err := mb.Put(kv.k, kv.v); err != nil {
			return fmt.Errorf("snapshot: put meta %s: %w", kv.k, err)
		}
	}
	sum, err := checksum(tx)
	if err != nil {
		return err
	}
	if err := mb.Put(keyChecksum, binary.BigEndian.AppendUint64(nil, sum)); err != nil {
		return fmt.Errorf("snapshot: put checksum: %w", err)
	}
	err = tx.Commit()
	tx = nil
	if err != nil {
		return fmt.Errorf("snapshot: commit: %w", err)
	}
	return db.Close()
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

var errWriterStopped = errors.New("snapshot: chunk writer stopped")

// replicaInterner numbers replica ids in first-seen order. The index hands
// out the same few id strings for millions of residencies, so a small
// cache keyed by the string's data pointer answers almost every lookup
// without hashing the id.
type replicaInterner struct {
	ids   []string
	byID  map[string]uint32
	cache [8]struct {
		p   *byte
		n   int
		idx uint32
	}
	next int
}

func (r *replicaInterner) id(s string) uint32 {
	p, n := unsafe.StringData(s), len(s)
	for i := range r.cache {
		if c := &r.cache[i]; c.p == p && c.n == n && p != nil {
			return c.idx
		}
	}
	if r.byID == nil {
		r.byID = map[string]uint32{}
	}
	idx, ok := r.byID[s]
	if !ok {
		idx = uint32(len(r.ids))
		r.byID[s] = idx
		r.ids = append(r.ids, s)
	}
	c := &r.cache[r.next%len(r.cache)]
	r.next++
	c.p, c.n, c.idx = p, n, idx
	return idx
}
