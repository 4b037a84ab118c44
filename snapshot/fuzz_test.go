package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/zeebo/xxh3"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/snapshot"
)

type nopBuilder struct{ blocks, stats int }

func (b *nopBuilder) AddBlock(index.BlockRecord) error  { b.blocks++; return nil }
func (b *nopBuilder) AddStats(index.ReplicaStats) error { b.stats++; return nil }

// validSnapshot is the stream of a small FSM (blocks of two replicas and
// one stats entry).
func validSnapshot(t testing.TB) []byte {
	m := fsm.New(policy.Default(), fsm.Options{TmpDir: t.TempDir()})
	p := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}
	ent, err := command.EncodeEntry(
		command.IngestCommand("a", []index.BlockEvent{{Kind: index.Stored, ReplicaID: "r1", Partition: p, BlockHashes: []uint64{1, 2, 3}, BlockTokenCounts: []uint32{16, 16, 16}, ObservedAtMs: 1000}}),
		command.IngestCommand("b", []index.BlockEvent{{Kind: index.Stored, ReplicaID: "r2", Partition: p, BlockHashes: []uint64{1, 9}, BlockTokenCounts: []uint32{16, 16}, ObservedAtMs: 1000}}),
		command.StatsCommand("c", []index.ReplicaStats{{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"vllm"}, TenantHitRate: map[string]float64{"t": 0.5}, ObservedAtMs: 1000}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	m.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: ent}})
	var buf bytes.Buffer
	if _, err := m.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// frame wraps body in a valid header and trailer (right length and
// checksum), so the fuzzer reaches bbolt and the record loader behind the
// stream checks.
func frame(body []byte) []byte {
	var hdr [24]byte
	copy(hdr[:8], "ICSNAP01")
	binary.BigEndian.PutUint32(hdr[8:12], 1)
	binary.BigEndian.PutUint64(hdr[16:24], uint64(len(body)))
	var tr [16]byte
	copy(tr[:8], "ICSNEND0")
	binary.BigEndian.PutUint64(tr[8:], xxh3.Hash(body))
	return append(append(hdr[:], body...), tr[:]...)
}

func snapshotSeeds(t testing.TB) [][]byte {
	v := validSnapshot(t)
	return [][]byte{v, v[:len(v)/2], v[:30], nil, []byte("ICSNAP01")}
}

// branchySeed is the stream of an index with many partitions and
// replicas, small enough to fuzz (a 64 KiB body once bodySeeds cuts it at
// the high-water mark), whose partitions and replicas buckets are branch
// pages over leaf pages: the page walk has more than inline buckets and
// one leaf to work on.
func branchySeed(t testing.TB) []byte {
	ix := index.New(policy.Default())
	for i := range 400 {
		p := index.Partition{Scheme: "vllm", Model: "model-" + strconv.Itoa(i%7), Tenant: "tenant-" + strconv.Itoa(i)}
		ix.ApplyEvents([]index.BlockEvent{{Kind: index.Stored, ReplicaID: "replica-" + strconv.Itoa(i%150), Partition: p,
			BlockHashes: []uint64{uint64(i)}, BlockTokenCounts: []uint32{16}, ObservedAtMs: 1000}})
	}
	v := ix.View()
	defer v.Release()
	var buf bytes.Buffer
	if _, err := snapshot.Write(&buf, t.TempDir(), 9, 2, v, []byte("dedup")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bodySeeds are bbolt bodies (no frame) for the reframe mode, cut at the
// high-water mark (bbolt grows its file ahead of the pages it uses): a
// smaller input mutates and minimizes faster.
func bodySeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, s := range [][]byte{validSnapshot(t), branchySeed(t)} {
		b := s[24 : len(s)-16]
		ps := uint64(ne.Uint32(b[16+8:]))
		m0, m1 := b[16:80], b[ps+16:ps+80]
		hwm := ne.Uint64(m0[40:])
		if ne.Uint64(m1[48:]) > ne.Uint64(m0[48:]) {
			hwm = ne.Uint64(m1[40:])
		}
		out = append(out, b[:hwm*ps])
	}
	return out
}

// fixBoltMetas recomputes the FNV-64a checksum of the bbolt meta in pages
// 0 and 1 (page size from meta 0 when it is sane, else 4 KiB), so a
// mutated meta field (root, high-water mark, txid, page size) reaches the
// page walk instead of failing bbolt's meta validation.
func fixBoltMetas(body []byte) {
	ps := 4096
	if len(body) >= 80 {
		if p := int(ne.Uint32(body[16+8:])); p >= 1024 && p <= 64<<10 && p&(p-1) == 0 {
			ps = p
		}
	}
	for _, at := range []int{16, ps + 16} {
		if at+64 > len(body) {
			continue
		}
		h := fnv.New64a()
		h.Write(body[at : at+56])
		ne.PutUint64(body[at+56:], h.Sum64())
	}
}

// FuzzRead feeds arbitrary streams to the snapshot loader. With reframe
// the input is taken as the bbolt body and given a valid frame (length
// and xxh3), so mutations of the bbolt file reach the page-graph check,
// bbolt, the meta and the record checks instead of failing the stream
// checksum; with fixMeta too, the bbolt meta checksums are recomputed
// first. The loader must return (a page cycle once made bbolt loop until
// the process ran out of memory), never panic, and every refusal must
// wrap ErrCorrupt, ErrTruncated or ErrVersion.
func FuzzRead(f *testing.F) {
	for _, s := range snapshotSeeds(f) {
		f.Add(s, false, false)
	}
	for _, b := range bodySeeds(f) {
		f.Add(b, true, false)
		f.Add(b, true, true)
	}
	tmp := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, reframe, fixMeta bool) {
		if reframe {
			if len(data) < 4096 || len(data) > 1<<20 {
				return
			}
			if fixMeta {
				data = bytes.Clone(data)
				fixBoltMetas(data)
			}
			data = frame(data)
		}
		type result struct{ read, inspect error }
		done := make(chan result, 1)
		go func() {
			b := &nopBuilder{}
			_, _, err := snapshot.Read(bytes.NewReader(data), tmp, func(policy.Policy) snapshot.Builder { return b })
			_, ierr := snapshot.Inspect(bytes.NewReader(data), tmp)
			done <- result{err, ierr}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("Read/Inspect of a %d-byte stream did not return within 20 s", len(data))
		}
		err, ierr := r.read, r.inspect
		if err != nil && !errors.Is(err, snapshot.ErrCorrupt) && !errors.Is(err, snapshot.ErrTruncated) && !errors.Is(err, snapshot.ErrVersion) {
			t.Fatalf("refusal %v wraps none of ErrCorrupt, ErrTruncated, ErrVersion", err)
		}
		// Inspect checks less than Read (no records): it may accept what
		// Read refuses, never the reverse.
		if err == nil && ierr != nil {
			t.Fatalf("Read accepted what Inspect refuses: %v", ierr)
		}
	})
}

// TestFuzzSeeds_WriteSnapshotCorpus writes testdata/fuzz/FuzzRead when
// FUZZ_WRITE_SEEDS is set.
func TestFuzzSeeds_WriteSnapshotCorpus(t *testing.T) {
	if os.Getenv("FUZZ_WRITE_SEEDS") == "" {
		t.Skip("set FUZZ_WRITE_SEEDS=1 to rewrite testdata/fuzz/FuzzRead")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzRead")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type seed struct {
		data             []byte
		reframe, fixMeta bool
	}
	var seeds []seed
	for _, s := range snapshotSeeds(t) {
		seeds = append(seeds, seed{s, false, false})
	}
	for _, b := range bodySeeds(t) {
		seeds = append(seeds, seed{b, true, false}, seed{b, true, true})
	}
	for i, s := range seeds {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s.data)) + ")\nbool(" + strconv.FormatBool(s.reframe) + ")\nbool(" + strconv.FormatBool(s.fixMeta) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, "seed-"+strconv.Itoa(i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The reframed seed bodies are whole snapshots: the fuzzer starts from
// files that read, not from ones the page check already refuses.
func TestFuzzSeeds_BodiesRead(t *testing.T) {
	for i, body := range bodySeeds(t) {
		if _, _, err := snapshot.Read(bytes.NewReader(frame(body)), t.TempDir(), func(policy.Policy) snapshot.Builder { return &nopBuilder{} }); err != nil {
			t.Errorf("body seed %d (%d bytes): %v", i, len(body), err)
		}
	}
}
