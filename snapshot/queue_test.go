package snapshot_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"testing"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/snapshot"
)

func statsOf(t *testing.T, ix *index.Index) map[string]index.ReplicaStats {
	t.Helper()
	v := ix.View()
	defer v.Release()
	out := map[string]index.ReplicaStats{}
	if err := v.Stats(func(s index.ReplicaStats) error { out[s.ReplicaID] = s; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// The engine's queue is part of the stats records: it survives a write and
// read, and so does the digest it enters.
func TestSnapshot_StatsQueueRoundTrips(t *testing.T) {
	ix := sampleIndex(t)
	ix.ApplyStats([]index.ReplicaStats{{ReplicaID: "b", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.7,
		ObservedAtMs: 2000, WaitingRequests: 9, RunningRequests: 250_000}})
	v := ix.View()
	var buf bytes.Buffer
	_, err := snapshot.Write(&buf, t.TempDir(), 42, 3, v, []byte("dedup"))
	v.Release()
	if err != nil {
		t.Fatal(err)
	}
	m, got, err := read(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest() != ix.Digest() || m.Digest != ix.Digest() {
		t.Fatalf("digest %x want %x (meta %x)", got.Digest(), ix.Digest(), m.Digest)
	}
	st := statsOf(t, got)
	if b := st["b"]; b.WaitingRequests != 9 || b.RunningRequests != 250_000 {
		t.Fatalf("b's stats after read: %+v", b)
	}
	if a := st["a"]; a.WaitingRequests != 0 || a.RunningRequests != 0 {
		t.Fatalf("a reported no queue, read back %+v", a)
	}
}

// testdata/before-queue.snap.gz is the snapshot of sampleIndex written by
// the release before stats carried a queue. It still reads, its stats have
// a queue of 0, and the index built from it has the digest its meta
// recorded then (a whole-cluster restore checks exactly that).
func TestSnapshot_BeforeQueueFieldsStillReads(t *testing.T) {
	f, err := os.Open("testdata/before-queue.snap.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	m, got, err := read(t, b)
	if err != nil {
		t.Fatal(err)
	}
	const before uint64 = 0x13a932a9c52c6427 // sampleIndex's digest in that release
	if m.Digest != before || got.Digest() != before {
		t.Fatalf("digest %x (meta %x), want %x", got.Digest(), m.Digest, before)
	}
	if got.Digest() != sampleIndex(t).Digest() {
		t.Fatal("the old snapshot's state digests differently from the same state built now")
	}
	st := statsOf(t, got)
	if a, ok := st["a"]; !ok || a.Pressure != 0.2 || a.WaitingRequests != 0 || a.RunningRequests != 0 {
		t.Fatalf("a's stats from the old snapshot: %+v (present %t)", a, ok)
	}
}
