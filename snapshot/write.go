package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
)

// writeDB writes src (and the dedup window) as a bbolt file at path: the
// blocks in chunks, then the partition, replica and stats tables, the
// dedup window and the meta bucket with its checksum.
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
	w := &chunkWriter{db: db, tx: tx}
	defer func() {
		if w.tx != nil {
			w.tx.Rollback()
		}
	}()
	for _, name := range append([][]byte{bucketMeta}, contentBuckets...) {
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("snapshot: create bucket %s: %w", name, err)
		}
	}
	enc, err := w.writeBlocks(ctx, src)
	if err != nil {
		return err
	}
	tx = w.tx
	if err := writeTables(tx, enc, src); err != nil {
		return err
	}
	if err := tx.Bucket(bucketDedup).Put(keyWindow, dedup); err != nil {
		return fmt.Errorf("snapshot: write dedup: %w", err)
	}
	if err := writeMeta(tx, appliedIndex, appliedTerm, src, w.chunkNo); err != nil {
		return err
	}
	err = tx.Commit()
	w.tx = nil
	if err != nil {
		return fmt.Errorf("snapshot: commit: %w", err)
	}
	return db.Close()
}

// chunkBuf is one chunk of encoded block records.
type chunkBuf struct {
	b    []byte // chunkHeadroom bytes reserved for the record count
	recs uint64
}

// chunkWriter puts finished chunks into bbolt on its own goroutine and
// commits every chunksPerTx, while the blocks are exported by the index
// (single-threaded: a sort and a walk) and encoded on the caller's
// goroutine; the two overlap. The write transaction belongs to the writer
// goroutine from start until done delivers (handed over through
// channels, never used concurrently).
type chunkWriter struct {
	db      *bbolt.DB
	tx      *bbolt.Tx // nil after a failed commit or begin
	chunkNo uint64    // chunks put
	full    chan *chunkBuf
	free    chan *chunkBuf
	done    chan error
}

// writeBlocks encodes src's blocks into chunks and has the writer
// goroutine put them into the blocks bucket. It returns the encoder, whose
// partition and replica tables the records refer to.
func (w *chunkWriter) writeBlocks(ctx context.Context, src Source) (*blockEncoder, error) {
	w.full = make(chan *chunkBuf, 4)
	w.free = make(chan *chunkBuf, chunksPerTx+8)
	w.done = make(chan error, 1)
	go w.run()
	enc := &blockEncoder{partIdx: map[index.Partition]uint32{}, cur: w.newChunk()}
	err := src.Blocks(func(r index.BlockRecord) error {
		enc.encode(r)
		if len(enc.cur.b)-chunkHeadroom < ChunkBytes {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case w.full <- enc.cur:
		case werr := <-w.done:
			w.done <- werr // the writer stopped early: report below
			return errWriterStopped
		}
		enc.cur = w.newChunk()
		return nil
	})
	if err == nil && enc.cur.recs > 0 {
		w.full <- enc.cur
	}
	close(w.full)
	if werr := <-w.done; werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: write blocks: %w", err)
	}
	return enc, nil
}

// newChunk returns an empty chunk, reusing one the writer has committed
// when there is one.
func (w *chunkWriter) newChunk() *chunkBuf {
	select {
	case c := <-w.free:
		c.b, c.recs = c.b[:chunkHeadroom], 0
		return c
	default:
		return &chunkBuf{b: make([]byte, chunkHeadroom, chunkHeadroom+ChunkBytes+4096)}
	}
}

// run is the writer goroutine: it puts every chunk from full, committing
// every chunksPerTx, and delivers its first error (or nil) on done. After
// an error it drains full.
func (w *chunkWriter) run() {
	var werr error
	var inTx []*chunkBuf // values bbolt references until commit
	for c := range w.full {
		if werr != nil {
			continue // drain
		}
		if werr = w.put(c); werr != nil {
			continue
		}
		inTx = append(inTx, c)
		if w.chunkNo%chunksPerTx == 0 {
			if werr = w.renew(); werr != nil {
				continue
			}
			for _, c := range inTx {
				select {
				case w.free <- c:
				default:
				}
			}
			inTx = inTx[:0]
		}
	}
	w.done <- werr
}

// put writes c's record count into its headroom and puts it under the
// next chunk number.
func (w *chunkWriter) put(c *chunkBuf) error {
	var key [8]byte
	n := binary.PutUvarint(key[:], c.recs)
	val := c.b[chunkHeadroom-n:]
	copy(val, key[:n])
	b := w.tx.Bucket(bucketBlocks)
	b.FillPercent = 1.0
	k := binary.BigEndian.AppendUint64(nil, w.chunkNo)
	if err := b.Put(k, val); err != nil {
		return fmt.Errorf("snapshot: put chunk %d: %w", w.chunkNo, err)
	}
	w.chunkNo++
	return nil
}

// renew commits the write transaction and begins the next one.
func (w *chunkWriter) renew() error {
	if err := w.tx.Commit(); err != nil {
		w.tx = nil
		return fmt.Errorf("snapshot: commit at chunk %d: %w", w.chunkNo, err)
	}
	tx, err := w.db.Begin(true)
	if err != nil {
		w.tx = nil
		return fmt.Errorf("snapshot: begin: %w", err)
	}
	w.tx = tx
	return nil
}

// blockEncoder appends block records to the current chunk, numbering
// partitions and replicas in first-seen order.
type blockEncoder struct {
	parts   []index.Partition
	partIdx map[index.Partition]uint32
	repls   replicaInterner
	cur     *chunkBuf
}

// encode appends r to the current chunk: partition number, hash, tokens,
// cumulative tokens, access count, then each resident's replica number
// and last-seen time.
func (e *blockEncoder) encode(r index.BlockRecord) {
	pi, ok := e.partIdx[r.Partition]
	if !ok {
		pi = uint32(len(e.parts))
		e.partIdx[r.Partition] = pi
		e.parts = append(e.parts, r.Partition)
	}
	chunk := e.cur.b
	chunk = binary.AppendUvarint(chunk, uint64(pi))
	chunk = binary.LittleEndian.AppendUint64(chunk, r.Hash)
	chunk = binary.AppendUvarint(chunk, uint64(r.Tokens))
	chunk = binary.AppendUvarint(chunk, uint64(r.CumTokens))
	chunk = binary.AppendUvarint(chunk, r.Access)
	chunk = binary.AppendUvarint(chunk, uint64(len(r.Residents)))
	for _, res := range r.Residents {
		chunk = binary.AppendUvarint(chunk, uint64(e.repls.id(res.ReplicaID)))
		chunk = binary.AppendVarint(chunk, res.LastSeenMs)
	}
	e.cur.b = chunk
	e.cur.recs++
}

// writeTables puts the partition and replica tables the block records
// refer to, and src's replica stats.
func writeTables(tx *bbolt.Tx, enc *blockEncoder, src Source) error {
	var k4 [4]byte
	pb := tx.Bucket(bucketPartitions)
	pb.FillPercent = 1.0
	for i, p := range enc.parts {
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
	for i, id := range enc.repls.ids {
		binary.BigEndian.PutUint32(k4[:], uint32(i))
		if err := rb.Put(append([]byte(nil), k4[:]...), []byte(id)); err != nil {
			return fmt.Errorf("snapshot: put replica %d: %w", i, err)
		}
	}
	sb := tx.Bucket(bucketStats)
	sb.FillPercent = 1.0
	var nStats uint32
	err := src.Stats(func(s index.ReplicaStats) error {
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
	return nil
}

// writeMeta puts the meta bucket (format version, applied index and term,
// creation time, policy, digest, sizes, chunk count) and then the
// checksum over every bucket.
func writeMeta(tx *bbolt.Tx, appliedIndex, appliedTerm uint64, src Source, chunks uint64) error {
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
		{keyChunks, binary.BigEndian.AppendUint64(nil, chunks)},
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
	return nil
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
