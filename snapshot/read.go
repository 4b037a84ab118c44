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
	br := bufio.NewReaderSize(r, 1<<20)
	bodyLen, err := readHeader(br)
	if err != nil {
		return nil, Meta{}, nil, err
	}
	path, sum, err := copyBody(br, tmpDir, bodyLen)
	if err != nil {
		return nil, Meta{}, nil, err
	}
	rm := func() { os.Remove(path) }
	var m Meta
	if m.StreamBytes, err = readTrailer(br, bodyLen, sum); err != nil {
		rm()
		return nil, Meta{}, nil, err
	}
	// bbolt follows page ids without cycle or depth checks; a crafted body
	// could make it loop or recurse until the process dies (pagecheck.go).
	if err := checkPages(path); err != nil {
		rm()
		return nil, Meta{}, nil, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		rm()
		return nil, Meta{}, nil, fmt.Errorf("%w: body is not a valid bbolt file: %v", ErrCorrupt, err)
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
		return nil, Meta{}, nil, err
	}
	return db, m, cleanup, nil
}

// readHeader reads and checks the frame's header (magic, format version,
// reserved bytes) and returns the body length it gives.
func readHeader(br *bufio.Reader) (uint64, error) {
	var hdr [headerLen]byte
	if n, err := io.ReadFull(br, hdr[:]); err != nil {
		return 0, fmt.Errorf("%w: header ends at byte %d of %d: %v", ErrTruncated, n, headerLen, err)
	}
	if [8]byte(hdr[:8]) != headerMagic {
		return 0, fmt.Errorf("%w: bad header magic %q at byte 0 (not an inference-cache snapshot)", ErrCorrupt, hdr[:8])
	}
	ver := binary.BigEndian.Uint32(hdr[8:12])
	if ver == 0 || ver > FormatVersion {
		return 0, fmt.Errorf("%w: header at byte 8 says format version %d, this binary reads 1..%d", ErrVersion, ver, FormatVersion)
	}
	if r := binary.BigEndian.Uint32(hdr[12:16]); r != 0 {
		// Reserved (written 0): a flag this binary does not know, or damage.
		return 0, fmt.Errorf("%w: header bytes 12..15 are reserved and must be 0, found %#x", ErrCorrupt, r)
	}
	bodyLen := binary.BigEndian.Uint64(hdr[16:24])
	if bodyLen > maxBody || bodyLen < 4096 {
		return 0, fmt.Errorf("%w: header at byte 16 gives body length %d", ErrCorrupt, bodyLen)
	}
	return bodyLen, nil
}

// copyBody copies the bodyLen bytes of the body from br to a new temp file
// in tmpDir and returns its path and the body's xxh3. On error no file is
// left behind.
func copyBody(br *bufio.Reader, tmpDir string, bodyLen uint64) (string, uint64, error) {
	f, err := os.CreateTemp(tmpDir, "inference-cache-restore-*.db")
	if err != nil {
		return "", 0, fmt.Errorf("snapshot: create temp file: %w", err)
	}
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
		os.Remove(f.Name())
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return "", 0, fmt.Errorf("%w: body ends at byte %d, header promised %d", ErrTruncated, headerLen+n, headerLen+int64(bodyLen))
		}
		return "", 0, fmt.Errorf("snapshot: copy body at byte %d: %w", headerLen+n, err)
	}
	return f.Name(), h.Sum64(), nil
}

// readTrailer reads and checks the trailer after a body of bodyLen bytes
// whose xxh3 is sum, and that nothing follows it. It returns the length of
// the whole frame.
func readTrailer(br *bufio.Reader, bodyLen, sum uint64) (int64, error) {
	var tr [trailerLen]byte
	if k, err := io.ReadFull(br, tr[:]); err != nil {
		return 0, fmt.Errorf("%w: trailer ends at byte %d, expected %d", ErrTruncated, headerLen+int64(bodyLen)+int64(k), headerLen+int64(bodyLen)+trailerLen)
	}
	if [8]byte(tr[:8]) != trailerMagic {
		return 0, fmt.Errorf("%w: bad trailer magic at byte %d", ErrCorrupt, headerLen+bodyLen)
	}
	if want := binary.BigEndian.Uint64(tr[8:]); want != sum {
		return 0, fmt.Errorf("%w: body checksum mismatch over bytes %d..%d (trailer %016x, computed %016x)", ErrCorrupt, headerLen, headerLen+bodyLen, want, sum)
	}
	streamBytes := headerLen + int64(bodyLen) + trailerLen
	// The frame says where the snapshot ends; anything after it means the
	// file is not what was written (two files concatenated, an append).
	if _, err := br.ReadByte(); err != io.EOF {
		if err != nil {
			return 0, fmt.Errorf("snapshot: read past the trailer at byte %d: %w", streamBytes, err)
		}
		return 0, fmt.Errorf("%w: unexpected bytes after the trailer at byte %d", ErrCorrupt, streamBytes)
	}
	return streamBytes, nil
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
