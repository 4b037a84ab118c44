package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/zeebo/xxh3"
	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// Read verifies the snapshot stream r (framing, format version, content
// checksum) and then feeds every record to the Builder returned by
// newBuilder(policy). Nothing reaches a Builder before the whole snapshot
// verified. It returns the meta and the opaque dedup window. Errors about
// the input wrap ErrCorrupt, ErrTruncated or ErrVersion and say where.
func Read(r io.Reader, tmpDir string, newBuilder func(policy.Policy) Builder) (_ Meta, _ []byte, err error) {
	defer faultGuard()()
	defer recoverCorrupt(&err)
	db, m, cleanup, err := open(r, tmpDir)
	if err != nil {
		return Meta{}, nil, err
	}
	defer cleanup()
	var dedup []byte
	err = db.View(func(tx *bbolt.Tx) error {
		b := newBuilder(m.Policy.Clone())
		if err := load(tx, m, b); err != nil {
			return err
		}
		dedup = append([]byte(nil), tx.Bucket(bucketDedup).Get(keyWindow)...)
		return nil
	})
	if err != nil {
		return Meta{}, nil, err
	}
	return m, dedup, nil
}

// Inspect verifies the stream like Read and returns its Meta without
// loading anything (for `snapshot inspect` and pre-restore checks).
func Inspect(r io.Reader, tmpDir string) (_ Meta, err error) {
	defer faultGuard()()
	defer recoverCorrupt(&err)
	db, m, cleanup, err := open(r, tmpDir)
	if err != nil {
		return Meta{}, err
	}
	_ = db
	cleanup()
	return m, nil
}

// InspectFile is Inspect on a file path.
func InspectFile(path string) (Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return Meta{}, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	defer f.Close()
	return Inspect(f, "")
}

// open copies the stream body to a temp file, checks the framing, opens it
// with bbolt read-only, reads meta and verifies the content checksum.
func open(r io.Reader, tmpDir string) (*bbolt.DB, Meta, func(), error) {
	var m Meta
	br := bufio.NewReaderSize(r, 1<<20)
	var hdr [headerLen]byte
	if n, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, m, nil, fmt.Errorf("%w: header ends at byte %d of %d: %v", ErrTruncated, n, headerLen, err)
	}
	if [8]byte(hdr[:8]) != headerMagic {
		return nil, m, nil, fmt.Errorf("%w: bad header magic %q at byte 0 (not an inference-cache snapshot)", ErrCorrupt, hdr[:8])
	}
	ver := binary.BigEndian.Uint32(hdr[8:12])
	if ver == 0 || ver > FormatVersion {
		return nil, m, nil, fmt.Errorf("%w: header at byte 8 says format version %d, this binary reads 1..%d", ErrVersion, ver, FormatVersion)
	}
	if r := binary.BigEndian.Uint32(hdr[12:16]); r != 0 {
		// Reserved (written 0): a flag this binary does not know, or damage.
		return nil, m, nil, fmt.Errorf("%w: header bytes 12..15 are reserved and must be 0, found %#x", ErrCorrupt, r)
	}
	bodyLen := binary.BigEndian.Uint64(hdr[16:24])
	if bodyLen > maxBody || bodyLen < 4096 {
		return nil, m, nil, fmt.Errorf("%w: header at byte 16 gives body length %d", ErrCorrupt, bodyLen)
	}
	f, err := os.CreateTemp(tmpDir, "inference-cache-restore-*.db")
	if err != nil {
		return nil, m, nil, fmt.Errorf("snapshot: create temp file: %w", err)
	}
	path := f.Name()
	rm := func() { os.Remove(path) }
	h := xxh3.New()
	bw := bufio.NewWriterSize(f, 1<<20)
	n, err := io.CopyN(io.MultiWriter(bw, h), br, int64(bodyLen))
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		rm()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, m, nil, fmt.Errorf("%w: body ends at byte %d, header promised %d", ErrTruncated, headerLen+n, headerLen+int64(bodyLen))
		}
		return nil, m, nil, fmt.Errorf("snapshot: copy body at byte %d: %w", headerLen+n, err)
	}
	var tr [trailerLen]byte
	if k, err := io.ReadFull(br, tr[:]); err != nil {
		rm()
		return nil, m, nil, fmt.Errorf("%w: trailer ends at byte %d, expected %d", ErrTruncated, headerLen+int64(bodyLen)+int64(k), headerLen+int64(bodyLen)+trailerLen)
	}
	if [8]byte(tr[:8]) != trailerMagic {
		rm()
		return nil, m, nil, fmt.Errorf("%w: bad trailer magic at byte %d", ErrCorrupt, headerLen+bodyLen)
	}
	if want, got := binary.BigEndian.Uint64(tr[8:]), h.Sum64(); want != got {
		rm()
		return nil, m, nil, fmt.Errorf("%w: body checksum mismatch over bytes %d..%d (trailer %016x, computed %016x)", ErrCorrupt, headerLen, headerLen+bodyLen, want, got)
	}
	m.StreamBytes = headerLen + int64(bodyLen) + trailerLen
	// The frame says where the snapshot ends; anything after it means the
	// file is not what was written (two files concatenated, an append).
	if _, err := br.ReadByte(); err != io.EOF {
		rm()
		if err != nil {
			return nil, m, nil, fmt.Errorf("snapshot: read past the trailer at byte %d: %w", m.StreamBytes, err)
		}
		return nil, m, nil, fmt.Errorf("%w: unexpected bytes after the trailer at byte %d", ErrCorrupt, m.StreamBytes)
	}

	// bbolt follows page ids without cycle or depth checks; a crafted body
	// could make it loop or recurse until the process dies (pagecheck.go).
	if err := checkPages(path); err != nil {
		rm()
		return nil, m, nil, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		rm()
		return nil, m, nil, fmt.Errorf("%w: body is not a valid bbolt file: %v", ErrCorrupt, err)
	}
	cleanup := func() { db.Close(); rm() }
	err = db.View(func(tx *bbolt.Tx) error {
		var err error
		m, err = readMeta(tx, m)
		if err != nil {
			return err
		}
		sum, err := checksum(tx)
		if err != nil {
			return err
		}
		if sum != m.Checksum {
			return fmt.Errorf("%w: content checksum mismatch (meta %016x, computed %016x)", ErrCorrupt, m.Checksum, sum)
		}
		return nil
	})
	if err != nil {
		cleanup()
		return nil, m, nil, err
	}
	return db, m, cleanup, nil
}

func readMeta(tx *bbolt.Tx, m Meta) (Meta, error) {
	mb := tx.Bucket(bucketMeta)
	if mb == nil {
		return m, fmt.Errorf("%w: meta bucket missing", ErrCorrupt)
	}
	u64 := func(k []byte) (uint64, error) {
		v := mb.Get(k)
		if len(v) != 8 {
			return 0, fmt.Errorf("%w: meta key %s has %d bytes, want 8", ErrCorrupt, k, len(v))
		}
		return binary.BigEndian.Uint64(v), nil
	}
	v := mb.Get(keyVersion)
	if len(v) != 4 {
		return m, fmt.Errorf("%w: meta key %s has %d bytes, want 4", ErrCorrupt, keyVersion, len(v))
	}
	m.FormatVersion = binary.BigEndian.Uint32(v)
	if m.FormatVersion == 0 || m.FormatVersion > FormatVersion {
		return m, fmt.Errorf("%w: meta bucket says format version %d, this binary reads 1..%d", ErrVersion, m.FormatVersion, FormatVersion)
	}
	var err error
	var created uint64
	for _, f := range []struct {
		k   []byte
		dst *uint64
	}{{keyIndex, &m.AppliedIndex}, {keyTerm, &m.AppliedTerm}, {keyCreated, &created}, {keyDigest, &m.Digest}, {keyChunks, &m.Chunks}, {keyChecksum, &m.Checksum}} {
		if *f.dst, err = u64(f.k); err != nil {
			return m, err
		}
	}
	m.CreatedAt = time.UnixMilli(int64(created))
	var pol fsmpb.Policy
	if err := proto.Unmarshal(mb.Get(keyPolicy), &pol); err != nil {
		return m, fmt.Errorf("%w: meta key policy: %v", ErrCorrupt, err)
	}
	m.Policy = fsmpb.PolicyFromPB(&pol)
	sz := mb.Get(keySizes)
	if len(sz) != 32 {
		return m, fmt.Errorf("%w: meta key sizes has %d bytes, want 32", ErrCorrupt, len(sz))
	}
	m.Sizes = index.Sizes{
		Partitions:  int(binary.BigEndian.Uint64(sz[0:])),
		Blocks:      int(binary.BigEndian.Uint64(sz[8:])),
		Residencies: int(binary.BigEndian.Uint64(sz[16:])),
		Replicas:    int(binary.BigEndian.Uint64(sz[24:])),
	}
	return m, nil
}

func load(tx *bbolt.Tx, m Meta, b Builder) error {
	var parts []index.Partition
	c := tx.Bucket(bucketPartitions).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 4 || binary.BigEndian.Uint32(k) != uint32(len(parts)) {
			return fmt.Errorf("%w: partitions key %x out of sequence", ErrCorrupt, k)
		}
		var s [4]string
		for i := range s {
			n, w := binary.Uvarint(v)
			if w <= 0 || uint64(len(v)-w) < n {
				return fmt.Errorf("%w: partitions record %d field %d", ErrCorrupt, len(parts), i)
			}
			s[i] = string(v[w : w+int(n)])
			v = v[w+int(n):]
		}
		parts = append(parts, index.Partition{Scheme: s[0], Model: s[1], Tenant: s[2], Adapter: s[3]})
	}
	var repls []string
	c = tx.Bucket(bucketReplicas).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 4 || binary.BigEndian.Uint32(k) != uint32(len(repls)) {
			return fmt.Errorf("%w: replicas key %x out of sequence", ErrCorrupt, k)
		}
		repls = append(repls, string(v))
	}

	// A decoder goroutine walks the blocks bucket and decodes whole chunks
	// into record batches while this goroutine feeds the builder (the
	// index's insert is single-threaded); the two overlap. The decoder owns
	// the blocks cursor; the read transaction stays open until both end.
	type batch struct {
		recs  []index.BlockRecord
		ends  []int // Residents of recs[i] is res[ends[i-1]:ends[i]]
		res   []index.Residency
		chunk uint64
		err   error
	}
	out := make(chan *batch, 2)
	free := make(chan *batch, 3)
	stop := make(chan struct{})
	var chunkNo uint64
	go func() {
		defer close(out)
		defer faultGuard()()
		defer func() { // a fault here would otherwise kill the process (guard.go)
			if r := recover(); r != nil {
				select {
				case out <- &batch{err: fmt.Errorf("%w: malformed bbolt file: %v", ErrCorrupt, r)}:
				case <-stop:
				}
			}
		}()
		send := func(b *batch) bool {
			select {
			case out <- b:
				return true
			case <-stop:
				return false
			}
		}
		c := tx.Bucket(bucketBlocks).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var bt *batch
			select {
			case bt = <-free:
				bt.recs, bt.ends, bt.res, bt.err = bt.recs[:0], bt.ends[:0], bt.res[:0], nil
			default:
				bt = &batch{}
			}
			bt.chunk = chunkNo
			if len(k) != 8 || binary.BigEndian.Uint64(k) != chunkNo {
				bt.err = fmt.Errorf("%w: blocks key %x out of sequence (want chunk %d)", ErrCorrupt, k, chunkNo)
				send(bt)
				return
			}
			d := decoder{b: v}
			nrec := d.uvarint()
			for i := uint64(0); i < nrec && d.err == nil; i++ {
				var r index.BlockRecord
				pi := d.uvarint()
				r.Hash = d.u64()
				r.Tokens = uint32(d.uvarint())
				r.CumTokens = uint32(d.uvarint())
				r.Access = d.uvarint()
				nres := d.uvarint()
				if d.err != nil || pi >= uint64(len(parts)) || nres > uint64(len(d.b)) {
					bt.err = fmt.Errorf("%w: blocks chunk %d record %d does not decode", ErrCorrupt, chunkNo, i)
					break
				}
				r.Partition = parts[pi]
				for j := uint64(0); j < nres; j++ {
					ri := d.uvarint()
					ls := d.varint()
					if d.err != nil || ri >= uint64(len(repls)) {
						bt.err = fmt.Errorf("%w: blocks chunk %d record %d resident %d does not decode", ErrCorrupt, chunkNo, i, j)
						break
					}
					bt.res = append(bt.res, index.Residency{ReplicaID: repls[ri], LastSeenMs: ls})
				}
				if bt.err != nil {
					break
				}
				bt.recs = append(bt.recs, r)
				bt.ends = append(bt.ends, len(bt.res))
			}
			if bt.err == nil && (d.err != nil || len(d.b) != 0) {
				bt.err = fmt.Errorf("%w: blocks chunk %d has trailing or short data", ErrCorrupt, chunkNo)
			}
			// records decoded before an error are still added, as the
			// sequential loader did, then the error is reported
			if !send(bt) || bt.err != nil {
				return
			}
			chunkNo++
		}
	}()
	var residencies, blocks int
	var lerr error
	for bt := range out {
		if lerr != nil {
			continue
		}
		start := 0
		for i := range bt.recs {
			r := bt.recs[i]
			r.Residents = bt.res[start:bt.ends[i]:bt.ends[i]]
			start = bt.ends[i]
			if err := b.AddBlock(r); err != nil {
				lerr = fmt.Errorf("%w: blocks chunk %d record %d: %v", ErrCorrupt, bt.chunk, i, err)
				break
			}
			residencies += len(r.Residents)
			blocks++
		}
		if lerr == nil && bt.err != nil {
			lerr = bt.err
		}
		if lerr != nil {
			close(stop)
			continue
		}
		select {
		case free <- bt:
		default:
		}
	}
	if lerr != nil {
		return lerr
	}
	if chunkNo != m.Chunks {
		return fmt.Errorf("%w: blocks bucket has %d chunks, meta says %d", ErrCorrupt, chunkNo, m.Chunks)
	}
	if blocks != m.Sizes.Blocks || residencies != m.Sizes.Residencies {
		return fmt.Errorf("%w: blocks bucket holds %d blocks / %d residencies, meta says %d / %d", ErrCorrupt, blocks, residencies, m.Sizes.Blocks, m.Sizes.Residencies)
	}
	c = tx.Bucket(bucketStats).Cursor()
	i := 0
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var s fsmpb.ReplicaStats
		if err := proto.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("%w: stats record %d: %v", ErrCorrupt, i, err)
		}
		if err := b.AddStats(fsmpb.StatsFromPB(&s)); err != nil {
			return fmt.Errorf("%w: stats record %d: %v", ErrCorrupt, i, err)
		}
		i++
	}
	return nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.err = io.ErrUnexpectedEOF
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
