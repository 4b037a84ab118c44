package command

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

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

// legacyIngestCommand is an ingest command as entries of format 1 carry
// it: no longer written, still read.
func legacyIngestCommand(requestID string, evs []index.BlockEvent) *fsmpb.Command {
	return &fsmpb.Command{RequestId: requestID, Body: &fsmpb.Command_Ingest{Ingest: &fsmpb.Ingest{Events: fsmpb.EventsToPB(evs)}}}
}

// legacyEntry encodes commands as an entry of format 1.
func legacyEntry(t testing.TB, cmds ...*fsmpb.Command) []byte {
	t.Helper()
	e := newEntryFormat(nil, 1)
	for _, c := range cmds {
		b, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		e = AppendCommand(e, b)
	}
	return e
}

func TestEntry_EncodeDecodeRoundTrip(t *testing.T) {
	cmds := []*fsmpb.Command{
		IngestCommand("r1", events("a", 1, 3, 5)),
		StatsCommand("s", []index.ReplicaStats{{ReplicaID: "a", TenantHitRate: map[string]float64{"x": 1}}}),
		SetPolicyCommand("p", policy.Default()),
		ExpireCommand("e", 42),
		CreditCommand("c", part, []uint64{7}),
		RestoreMarkCommand("m", 9, 10),
	}
	b, err := EncodeEntry(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if e.Format != EntryFormat || len(e.Commands) != len(cmds) {
		t.Fatalf("format %d, %d commands", e.Format, len(e.Commands))
	}
	for i := range cmds {
		if !proto.Equal(cmds[i], e.Commands[i]) {
			t.Errorf("command %d differs after round trip", i)
		}
	}
	if got := fsmpb.PolicyFromPB(e.Commands[2].GetSetPolicy().GetPolicy()); got.EvictionTTL != policy.Default().EvictionTTL || !got.ChainMatching {
		t.Errorf("policy round trip: %+v", got)
	}
	if _, err := DecodeEntry([]byte{0xff, 0xff}); !errors.Is(err, ErrDecode) {
		t.Errorf("garbage: %v", err)
	}
}

// Map fields encode in random order unless marshalled deterministically;
// a retried stats command must encode to the same bytes or it would be
// refused as a reuse.
func TestMarshal_IsDeterministicForMaps(t *testing.T) {
	rates := map[string]float64{}
	for i := 0; i < 64; i++ {
		rates[fmt.Sprintf("tenant-%d", i)] = float64(i) / 64
	}
	c := StatsCommand("s", []index.ReplicaStats{{ReplicaID: "a", TenantHitRate: rates}})
	first, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		again, err := Marshal(StatsCommand("s", []index.ReplicaStats{{ReplicaID: "a", TenantHitRate: rates}}))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatal("the same stats command encoded to different bytes")
		}
	}
}
