package snapshot_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/snapshot"
)

func sampleIndex(t *testing.T) *index.Index {
	t.Helper()
	ix := index.New(policy.Default())
	for r := 0; r < 3; r++ {
		hs := make([]uint64, 50)
		tc := make([]uint32, 50)
		for i := range hs {
			hs[i] = uint64(1000*r + i)
			tc[i] = 16
		}
		ix.ApplyEvents([]index.BlockEvent{{Kind: index.Stored, ReplicaID: string(rune('a' + r)),
			Partition: index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}, BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: 1000}})
	}
	ix.ApplyStats([]index.ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.2, TenantHitRate: map[string]float64{"t": 0.5}, ObservedAtMs: 1000}})
	return ix
}

func write(t *testing.T) ([]byte, *index.Index) {
	t.Helper()
	ix := sampleIndex(t)
	v := ix.View()
	defer v.Release()
	var buf bytes.Buffer
	n, err := snapshot.Write(&buf, t.TempDir(), 42, 3, v, []byte("dedup"))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("returned %d, wrote %d", n, buf.Len())
	}
	return buf.Bytes(), ix
}

func read(t *testing.T, b []byte) (snapshot.Meta, *index.Index, error) {
	var bld *index.Builder
	m, dd, err := snapshot.Read(bytes.NewReader(b), t.TempDir(), func(p policy.Policy) snapshot.Builder {
		bld = index.NewBuilder(p)
		return bld
	})
	if err != nil {
		return m, nil, err
	}
	if string(dd) != "dedup" {
		t.Fatalf("dedup %q", dd)
	}
	return m, bld.Build(), nil
}

func TestSnapshot_RoundTripKeepsDigest(t *testing.T) {
	b, ix := write(t)
	m, got, err := read(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if m.AppliedIndex != 42 || m.AppliedTerm != 3 || m.FormatVersion != snapshot.FormatVersion || m.Sizes != ix.Sizes() {
		t.Fatalf("meta %+v sizes %+v", m, ix.Sizes())
	}
	if got.Digest() != ix.Digest() || m.Digest != ix.Digest() {
		t.Fatalf("digest %x want %x (meta %x)", got.Digest(), ix.Digest(), m.Digest)
	}
	im, err := snapshot.Inspect(bytes.NewReader(b), t.TempDir())
	if err != nil || im.Checksum != m.Checksum || im.StreamBytes != int64(len(b)) {
		t.Fatalf("inspect %+v %v", im, err)
	}
}

func TestSnapshot_TruncatedRefused(t *testing.T) {
	b, _ := write(t)
	for _, cut := range []int{0, 10, 24, len(b) / 2, len(b) - 16, len(b) - 1} {
		if _, _, err := read(t, b[:cut]); !errors.Is(err, snapshot.ErrTruncated) {
			t.Errorf("cut at %d: %v", cut, err)
		} else if cut == len(b)/2 {
			t.Logf("cut at %d: %v", cut, err)
		}
	}
}

func TestSnapshot_CorruptRefused(t *testing.T) {
	b, _ := write(t)
	for _, off := range []int{0, 30, 4096 + 100, len(b) / 2, len(b) - 20, len(b) - 3} {
		c := bytes.Clone(b)
		c[off] ^= 0x5a
		if _, _, err := read(t, c); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("flip at %d: %v", off, err)
		} else if off == len(b)/2 {
			t.Logf("flip at %d: %v", off, err)
		}
	}
}

// Bytes after the trailer mean the file is not what was written (two
// files concatenated, an append): refused, not silently ignored.
func TestSnapshot_TrailingBytesRefused(t *testing.T) {
	b, _ := write(t)
	_, _, err := read(t, append(bytes.Clone(b), "JUNK"...))
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "after the trailer") {
		t.Fatalf("trailing bytes: %v", err)
	}
	if _, err := snapshot.Inspect(bytes.NewReader(append(bytes.Clone(b), 0)), t.TempDir()); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("inspect with a trailing byte: %v", err)
	}
}

func TestSnapshot_FutureVersionRefused(t *testing.T) {
	b, _ := write(t)
	c := bytes.Clone(b)
	binary.BigEndian.PutUint32(c[8:12], snapshot.FormatVersion+1)
	_, _, err := read(t, c)
	if !errors.Is(err, snapshot.ErrVersion) {
		t.Fatalf("future version: %v", err)
	}
	t.Log(err)
}

// A set reserved header byte is refused, not ignored.
func TestRead_RefusesReservedHeaderBytes(t *testing.T) {
	b, _ := write(t)
	c := bytes.Clone(b)
	c[15] = 7
	if _, _, err := read(t, c); !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("reserved byte set: %v", err)
	}
}

// bigIndex holds blocks blocks, each on two replicas.
func bigIndex(t testing.TB, blocks int) *index.Index {
	t.Helper()
	ix := index.New(policy.Default())
	const per = 500
	for c := 0; c < blocks/per; c++ {
		hs := make([]uint64, per)
		tc := make([]uint32, per)
		for i := range hs {
			hs[i] = uint64(c)<<20 | uint64(i)
			tc[i] = 16
		}
		for r := 0; r < 2; r++ {
			ix.ApplyEvents([]index.BlockEvent{{Kind: index.Stored, ReplicaID: string(rune('a' + (c+r)%5)),
				Partition: index.Partition{Scheme: "vllm", Model: "m"}, BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: int64(1000 + c)}})
		}
	}
	return ix
}

// failingBuilder fails at the n-th block.
type failingBuilder struct {
	*index.Builder
	n, seen int
}

func (f *failingBuilder) AddBlock(r index.BlockRecord) error {
	if f.seen++; f.seen == f.n {
		return errors.New("builder says no")
	}
	return f.Builder.AddBlock(r)
}

// Many chunks go through the pipelined writer and reader intact, and a
// builder error in the middle of the stream stops the reader cleanly with
// an error naming the chunk and record.
func TestSnapshot_ManyChunksPipelined(t *testing.T) {
	ix := bigIndex(t, 60000)
	v := ix.View()
	var buf bytes.Buffer
	if _, err := snapshot.Write(&buf, t.TempDir(), 7, 1, v, []byte("dedup")); err != nil {
		t.Fatal(err)
	}
	v.Release()
	m, got, err := read(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if m.Chunks < 3 {
		t.Fatalf("only %d chunks: the test does not exercise the pipeline", m.Chunks)
	}
	if got.Digest() != ix.Digest() || got.Sizes() != ix.Sizes() {
		t.Fatalf("round trip: digest %x/%x sizes %+v/%+v", got.Digest(), ix.Digest(), got.Sizes(), ix.Sizes())
	}
	_, _, err = snapshot.Read(bytes.NewReader(buf.Bytes()), t.TempDir(), func(p policy.Policy) snapshot.Builder {
		return &failingBuilder{Builder: index.NewBuilder(p), n: 45000}
	})
	if !errors.Is(err, snapshot.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte("builder says no")) {
		t.Fatalf("builder failure: %v", err)
	}
}

// cancelAfter cancels its context once n bytes were written through it.
type cancelAfter struct {
	buf    bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) >= c.n {
		c.cancel()
	}
	return c.buf.Write(p)
}

// WriteContext stops once its context is done: before the blocks are
// exported (cancelled up front), and while the stream is written to w
// (cancelled after the first 1 MiB). Either way the error wraps
// context.Canceled and the stream written is not a valid snapshot.
func TestWriteContext_StopsWhenCancelled(t *testing.T) {
	ix := bigIndex(t, 60000)
	v := ix.View()
	defer v.Release()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var buf bytes.Buffer
	if _, err := snapshot.WriteContext(ctx, &buf, t.TempDir(), 7, 1, v, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled up front: err %v, want context.Canceled", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("cancelled up front: %d bytes written", buf.Len())
	}

	var full bytes.Buffer
	total, err := snapshot.Write(&full, t.TempDir(), 7, 1, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	w := &cancelAfter{n: 1 << 20, cancel: cancel}
	if total <= int64(w.n)+(1<<20) {
		t.Fatalf("stream of %d bytes: too small to cancel in the middle", total)
	}
	if _, err := snapshot.WriteContext(ctx, w, t.TempDir(), 7, 1, v, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while streaming: err %v, want context.Canceled", err)
	}
	if int64(w.buf.Len()) >= total {
		t.Fatalf("cancelled while streaming: wrote all %d bytes", total)
	}
	if _, _, err := read(t, w.buf.Bytes()); err == nil {
		t.Fatal("the cut stream reads as a snapshot")
	}
}
