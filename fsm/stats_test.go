package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// oldStatsEntry is a log entry holding one stats command, as written by the
// release before ReplicaStats carried the engine's queue:
// command.StatsCommand("stats-old", vllm-0, model m, scheme vllm, pressure 0.5,
// hit rate t = 0.25, observed at 1,700,000,000,000, endpoint
// http://10.0.0.5:8000/metrics). oldStatsHash is that release's
// payload hash of the command.
const (
	oldStatsEntry = "0801125b0a0973746174732d6f6c641a4e0a4c0a06766c6c6d2d3012016d1a04766c6c6d21000000000000e03f2a01743208000000000000d03f3880d095ffbc31421c687474703a2f2f31302e302e302e353a383030302f6d657472696373"
	oldStatsHash  = uint64(0x54ba34f8bb559f26)
)

var oldStats = index.ReplicaStats{ReplicaID: "vllm-0", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.5,
	TenantHitRate: map[string]float64{"t": 0.25}, ObservedAtMs: 1_700_000_000_000, Endpoint: "http://10.0.0.5:8000/metrics"}

func statsOf(t *testing.T, f *FSM) []index.ReplicaStats {
	t.Helper()
	var out []index.ReplicaStats
	if err := f.Index().View().Stats(func(s index.ReplicaStats) error { out = append(out, s); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// A stats command carries the queue through the log into the index, and
// survives a snapshot and restore.
func TestStatsCommand_QueueReachesIndexAndSnapshot(t *testing.T) {
	st := oldStats
	st.WaitingRequests, st.RunningRequests = 17, 5
	b := &logBuilder{}
	f := New(policy.Default(), Options{TmpDir: t.TempDir()})
	if r := f.Apply(b.add(t, command.StatsCommand("q", []index.ReplicaStats{st}))).(*EntryResult).Results[0]; r.Err != nil || r.Changed != 1 {
		t.Fatalf("apply: %+v", r)
	}
	got := statsOf(t, f)
	if len(got) != 1 || got[0].WaitingRequests != 17 || got[0].RunningRequests != 5 {
		t.Fatalf("stats after apply: %+v", got)
	}

	dst := New(policy.Default(), Options{TmpDir: t.TempDir()})
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	got = statsOf(t, dst)
	if len(got) != 1 || got[0].WaitingRequests != 17 || got[0].RunningRequests != 5 {
		t.Fatalf("stats after snapshot and restore: %+v", got)
	}
	_, d1 := f.Digest()
	_, d2 := dst.Digest()
	if d1 != d2 {
		t.Fatalf("digest %x after restore, want %x", d2, d1)
	}
}

// An entry written before the queue fields applies as it did, with a
// queue of 0; the same stats without a queue encode to the same bytes and
// hash to the same dedup payload, so a retry across an upgrade is still a
// retry.
func TestStatsCommand_OldEntryDecodesWithZeroQueue(t *testing.T) {
	data, err := hex.DecodeString(oldStatsEntry)
	if err != nil {
		t.Fatal(err)
	}
	f := New(policy.Default(), Options{})
	r := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}).(*EntryResult).Results[0]
	if r.Err != nil || r.Changed != 1 {
		t.Fatalf("old entry: %+v", r)
	}
	got := statsOf(t, f)
	if len(got) != 1 || got[0].WaitingRequests != 0 || got[0].RunningRequests != 0 || got[0].Pressure != 0.5 || got[0].Endpoint != oldStats.Endpoint {
		t.Fatalf("stats from the old entry: %+v", got)
	}

	// The command's bytes, after the entry's format field (0x08 0x01).
	again, err := command.Marshal(command.StatsCommand("stats-old", []index.ReplicaStats{oldStats}))
	if err != nil {
		t.Fatal(err)
	}
	if again := command.AppendCommand(nil, again); !bytes.Equal(again, data[2:]) {
		t.Errorf("stats without a queue encode to\n%x\nwant the old bytes\n%x", again, data[2:])
	}
	var dec command.Decoder
	_, dcs, err := dec.Decode(data)
	if err != nil || len(dcs) != 1 {
		t.Fatalf("decode the old entry: %v, %d commands", err, len(dcs))
	}
	if h, _ := command.PayloadHash(&dcs[0], nil); h != oldStatsHash {
		t.Errorf("payload hash %#x, want the old %#x", h, oldStatsHash)
	}
	// The retry of that write is a duplicate; the same id with a queue
	// is another write, refused as a reuse.
	b := &logBuilder{idx: 1}
	if r := f.Apply(b.add(t, command.StatsCommand("stats-old", []index.ReplicaStats{oldStats}))).(*EntryResult).Results[0]; !r.Duplicate {
		t.Errorf("retry: %+v, want a duplicate", r)
	}
	queued := oldStats
	queued.WaitingRequests = 1
	if r := f.Apply(b.add(t, command.StatsCommand("stats-old", []index.ReplicaStats{queued}))).(*EntryResult).Results[0]; !errors.Is(r.Err, ErrRequestIDReused) {
		t.Errorf("same id with a queue: %+v, want ErrRequestIDReused", r)
	}
}

// The conversions keep the queue both ways.
func TestStatsPB_QueueRoundTrip(t *testing.T) {
	st := oldStats
	st.WaitingRequests, st.RunningRequests = 1_000_000, 3
	back := fsmpb.StatsFromPB(fsmpb.StatsToPB(st))
	if back.WaitingRequests != 1_000_000 || back.RunningRequests != 3 {
		t.Fatalf("round trip: %+v", back)
	}
}
