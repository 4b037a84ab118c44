package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

var part = index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}

func events(replica string, base uint64, n int, at int64) []index.BlockEvent {
	hs := make([]uint64, n)
	tc := make([]uint32, n)
	for i := range hs {
		hs[i] = base + uint64(i)
		tc[i] = 16
	}
	return []index.BlockEvent{{Kind: index.Stored, ReplicaID: replica, Partition: part, BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: at}}
}

// legacyIngest is an ingest command as entries of format 1 carry it (a
// protobuf message per event): no longer written, still applied.
func legacyIngest(t testing.TB, requestID string, evs []index.BlockEvent) []byte {
	t.Helper()
	b, err := command.Marshal(&fsmpb.Command{RequestId: requestID,
		Body: &fsmpb.Command_Ingest{Ingest: &fsmpb.Ingest{Events: fsmpb.EventsToPB(evs)}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type logBuilder struct {
	idx  uint64
	logs []*raft.Log
}

func (b *logBuilder) add(t testing.TB, cmds ...*fsmpb.Command) *raft.Log {
	t.Helper()
	data, err := command.EncodeEntry(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	b.idx++
	l := &raft.Log{Index: b.idx, Term: 1, Type: raft.LogCommand, Data: data}
	b.logs = append(b.logs, l)
	return l
}

func sampleLog(t *testing.T) *logBuilder {
	b := &logBuilder{}
	b.add(t, command.IngestCommand("r1", events("a", 100, 8, 1_000)), command.IngestCommand("r2", events("b", 100, 4, 2_000)))
	b.add(t, command.StatsCommand("s1", []index.ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.5,
		TenantHitRate: map[string]float64{"t": 0.3, "u": 0.1, "v": 0.9}, ObservedAtMs: 1_500}}))
	b.logs = append(b.logs, &raft.Log{Index: b.idx + 1, Term: 1, Type: raft.LogConfiguration})
	b.idx++
	b.add(t, command.IngestCommand("r3", events("c", 200, 16, 3_000)))
	b.add(t, command.ExpireCommand("e1", 600_000+1_500))
	b.add(t, command.CreditCommand("c1", part, []uint64{200, 201}))
	return b
}

func TestApply_DeterministicAcrossNodes(t *testing.T) {
	b := sampleLog(t)
	f1, f2 := New(policy.Default(), Options{}), New(policy.Default(), Options{})
	f1.ApplyBatch(b.logs)
	for _, l := range b.logs { // one at a time on the other "node"
		f2.Apply(l)
	}
	i1, d1 := f1.Digest()
	i2, d2 := f2.Digest()
	if i1 != b.idx || i1 != i2 || d1 != d2 {
		t.Fatalf("node1 (%d, %x) node2 (%d, %x)", i1, d1, i2, d2)
	}
}

func TestApply_RetriedRequestIDAppliesOnce(t *testing.T) {
	f := New(policy.Default(), Options{})
	b := &logBuilder{}
	r1 := f.Apply(b.add(t, command.IngestCommand("same", events("a", 1, 4, 10)))).(*EntryResult).Results[0]
	_, d1 := f.Digest()
	r2 := f.Apply(b.add(t, command.IngestCommand("same", events("a", 1, 4, 10)))).(*EntryResult).Results[0]
	_, d2 := f.Digest()
	if r1.Duplicate || !r2.Duplicate || r2.Index != r1.Index || r2.Err != nil || d1 != d2 {
		t.Fatalf("first %+v second %+v digests %x %x", r1, r2, d1, d2)
	}
	if f.AppliedIndex() != 2 {
		t.Fatalf("applied %d", f.AppliedIndex())
	}
}

// A request id reused for other bytes is not a retry: taking it for one
// would drop the write silently. It is refused, changes nothing, and the
// original stays remembered (its own retry is still a duplicate).
func TestApply_ReusedRequestIDWithOtherPayloadIsRefused(t *testing.T) {
	stats := func(rate float64) *fsmpb.Command {
		return command.StatsCommand("st", []index.ReplicaStats{{ReplicaID: "a", Pressure: 0.5,
			TenantHitRate: map[string]float64{"t1": rate, "t2": 0.1, "t3": 0.2, "t4": 0.3}}})
	}
	for _, c := range []struct {
		name          string
		first, reused *fsmpb.Command
	}{
		{"ingest, other blocks", command.IngestCommand("same", events("a", 1, 4, 10)), command.IngestCommand("same", events("a", 50, 4, 10))},
		{"ingest, other replica", command.IngestCommand("same", events("a", 1, 4, 10)), command.IngestCommand("same", events("b", 1, 4, 10))},
		{"stats", stats(0.5), stats(0.9)},
		{"policy", command.SetPolicyCommand("p", policy.Default()), func() *fsmpb.Command {
			p := policy.Default()
			p.MinimumMatchedTokens++
			return command.SetPolicyCommand("p", p)
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New(policy.Default(), Options{})
			b := &logBuilder{}
			r1 := f.Apply(b.add(t, c.first)).(*EntryResult).Results[0]
			_, d1 := f.Digest()
			r2 := f.Apply(b.add(t, c.reused)).(*EntryResult).Results[0]
			_, d2 := f.Digest()
			if !errors.Is(r2.Err, ErrRequestIDReused) || !errors.Is(r2.Err, ErrRejected) || r2.Duplicate || d1 != d2 {
				t.Fatalf("reused id: %+v (digest %x → %x); want ErrRequestIDReused and no change", r2, d1, d2)
			}
			r3 := f.Apply(b.add(t, c.first)).(*EntryResult).Results[0]
			if !r3.Duplicate || r3.Index != r1.Index || r3.Err != nil {
				t.Fatalf("retry of the original after a refused reuse: %+v", r3)
			}
		})
	}
}

// The receiving node stamps observed_at_ms = 0 with its own clock, so a
// retry through another node (or later) carries another timestamp: it is
// still the same write.
func TestApply_RetryWithAnotherServerTimestampIsADuplicate(t *testing.T) {
	f := New(policy.Default(), Options{})
	b := &logBuilder{}
	st := func(at int64) *fsmpb.Command {
		return command.StatsCommand("st", []index.ReplicaStats{{ReplicaID: "a", Pressure: 0.5, TenantHitRate: map[string]float64{"t": 0.2}, ObservedAtMs: at}})
	}
	for _, pair := range [][2]*fsmpb.Command{
		{command.IngestCommand("in", events("a", 1, 4, 1_000)), command.IngestCommand("in", events("a", 1, 4, 2_000))},
		{st(1_000), st(2_000)},
	} {
		r1 := f.Apply(b.add(t, pair[0])).(*EntryResult).Results[0]
		r2 := f.Apply(b.add(t, pair[1])).(*EntryResult).Results[0]
		if r1.Duplicate || !r2.Duplicate || r2.Err != nil || r2.Index != r1.Index {
			t.Fatalf("%s: first %+v retry %+v; want the retry a duplicate", r1.RequestID, r1, r2)
		}
	}
}

func TestSetPolicy_VersionGrowsByOne(t *testing.T) {
	f := New(policy.Default(), Options{})
	b := &logBuilder{}
	p := policy.Default()
	p.MaxReplicas = 7
	p.Version = 99 // ignored
	r := f.Apply(b.add(t, command.SetPolicyCommand("p1", p))).(*EntryResult).Results[0]
	if r.Err != nil || r.Policy.Version != 1 || f.Policy().MaxReplicas != 7 {
		t.Fatalf("%+v %+v", r, f.Policy())
	}
	p.MaxReplicas = 0 // invalid
	r = f.Apply(b.add(t, command.SetPolicyCommand("p2", p))).(*EntryResult).Results[0]
	if !errors.Is(r.Err, ErrRejected) || f.Policy().Version != 1 {
		t.Fatalf("invalid policy: %+v version %d", r, f.Policy().Version)
	}
	p.MaxReplicas = 3
	p.EvictionBatch = 16
	r = f.Apply(b.add(t, command.SetPolicyCommand("p3", p))).(*EntryResult).Results[0]
	if r.Policy.Version != 2 || f.Policy().EvictionBatch != 16 {
		t.Fatalf("version %d, eviction batch %d", r.Policy.Version, f.Policy().EvictionBatch)
	}
	// The knob is replicated state: a node restored from a snapshot
	// evicts like the others.
	dst := New(policy.Default(), Options{TmpDir: t.TempDir()})
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if got := dst.Policy().EvictionBatch; got != 16 {
		t.Fatalf("restored eviction batch %d, want 16", got)
	}
}

func TestApply_NewerEntryFormatRejectedEverywhere(t *testing.T) {
	f := New(policy.Default(), Options{})
	e := &fsmpb.Entry{Format: command.EntryFormat + 1, Commands: []*fsmpb.Command{command.IngestCommand("x", events("a", 1, 2, 1))}}
	data, _ := proto.Marshal(e)
	r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).(*EntryResult)
	if !errors.Is(r.Results[0].Err, command.ErrEntryFormat) {
		t.Fatalf("%+v", r.Results[0])
	}
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRestore_DiscardsPreviousStateAndKeepsDedup(t *testing.T) {
	src := New(policy.Default(), Options{TmpDir: t.TempDir()})
	src.ApplyBatch(sampleLog(t).logs)
	snap := snapshotBytes(t, src)

	dst := New(policy.Default(), Options{TmpDir: t.TempDir()})
	other := &logBuilder{}
	other.add(t, command.IngestCommand("zzz", events("other", 9000, 32, 9)))
	other.add(t, command.SetPolicyCommand("pol", policy.Default()))
	dst.ApplyBatch(other.logs)

	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	si, sd := src.Digest()
	di, dd := dst.Digest()
	if si != di || sd != dd {
		t.Fatalf("after restore: src (%d,%x) dst (%d,%x)", si, sd, di, dd)
	}
	if dst.Policy().Version != 0 {
		t.Fatalf("policy version %d survived restore", dst.Policy().Version)
	}
	if dst.DedupLen() != src.DedupLen() {
		t.Fatalf("dedup %d vs %d", dst.DedupLen(), src.DedupLen())
	}
	// the dedup window came with the snapshot: r1 (retried with its bytes) is a duplicate, zzz is not
	b := &logBuilder{idx: 100}
	res := dst.Apply(b.add(t, command.IngestCommand("r1", events("a", 100, 8, 1_000)), command.IngestCommand("zzz", events("x", 1, 1, 1)))).(*EntryResult)
	if !res.Results[0].Duplicate || res.Results[1].Duplicate {
		t.Fatalf("dedup after restore: %+v", res.Results)
	}
	// ... and so did the payload hashes: r1 reused for other events is refused.
	res = dst.Apply(b.add(t, command.IngestCommand("r1", events("a", 7, 2, 1_000)))).(*EntryResult)
	if !errors.Is(res.Results[0].Err, ErrRequestIDReused) {
		t.Fatalf("reuse after restore: %+v", res.Results[0])
	}
}

func TestDedup_WindowIsBoundedAndOrdered(t *testing.T) {
	d := newDedup()
	for i := 0; i < DedupWindow+10; i++ {
		d.add(&fsmpb.DedupEntry{RequestId: fmt.Sprint(i), Index: uint64(i)})
	}
	if d.len() != DedupWindow || d.get("9") != nil || d.get("10") == nil {
		t.Fatalf("len %d", d.len())
	}
	b, _ := marshalDedup(d.entries(), nil, nil)
	d2, _, _, err := unmarshalDedup(b)
	if err != nil || d2.len() != DedupWindow || d2.entries()[0].RequestId != "10" {
		t.Fatalf("round trip: %v", err)
	}
}

// recordingSink is a raft.SnapshotSink that records how it was ended.
type recordingSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *recordingSink) ID() string    { return "test" }
func (s *recordingSink) Close() error  { s.closed = true; return nil }
func (s *recordingSink) Cancel() error { s.cancelled = true; return nil }

// AbortSnapshots makes a snapshot taken before it fail in Persist (its
// sink cancelled, not closed, so raft records nothing) and every later
// WriteSnapshot fail too; the hook sees the failure and the state stays
// as it was.
func TestAbortSnapshots_StopsPersist(t *testing.T) {
	var hookErr error
	f := New(policy.Default(), Options{TmpDir: t.TempDir(), Hooks: Hooks{OnSnapshot: func(_ int64, _ time.Duration, err error) { hookErr = err }}})
	f.ApplyBatch(sampleLog(t).logs)
	_, digest := f.Digest()

	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f.AbortSnapshots()
	f.AbortSnapshots() // idempotent
	sink := &recordingSink{}
	if err := s.Persist(sink); !errors.Is(err, context.Canceled) {
		t.Fatalf("Persist after AbortSnapshots: err %v, want context.Canceled", err)
	}
	s.Release()
	if !sink.cancelled || sink.closed {
		t.Fatalf("sink cancelled %v, closed %v: want cancelled only", sink.cancelled, sink.closed)
	}
	if !errors.Is(hookErr, context.Canceled) {
		t.Fatalf("OnSnapshot saw %v, want context.Canceled", hookErr)
	}
	var buf bytes.Buffer
	if _, err := f.WriteSnapshot(&buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteSnapshot after AbortSnapshots: err %v", err)
	}
	if _, d := f.Digest(); d != digest {
		t.Fatalf("digest %x after the aborted snapshot, was %x", d, digest)
	}
}
