package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// benchEntry is one group-commit-sized ingest entry: 16 commands of 64
// STORED events of 4 blocks each (the raftnode ingest bench's shape).
func benchEntry(b *testing.B, round int) *raft.Log {
	lb := &logBuilder{idx: uint64(round)}
	cmds := make([]*fsmpb.Command, 0, 16)
	for c := 0; c < 16; c++ {
		var evs []index.BlockEvent
		for e := 0; e < 64; e++ {
			evs = append(evs, events("replica-"+string(rune('a'+e%8)), uint64(round)<<20|uint64(c*64+e)<<4, 4, 1_000)...)
		}
		cmds = append(cmds, command.IngestCommand(fmt.Sprintf("req-%d-%d", round, c), evs))
	}
	return lb.add(b, cmds...)
}

// BenchmarkApplyIngestEntry measures the apply of one ingest entry with
// request ids (payload hash computed) and, as the same run's reference,
// the payload hash alone over the same commands: the hash's share of
// apply is the ratio of the two.
func BenchmarkApplyIngestEntry(b *testing.B) {
	b.Run("apply", func(b *testing.B) {
		f := New(policy.Default(), Options{})
		logs := make([]*raft.Log, b.N)
		for i := range logs {
			logs[i] = benchEntry(b, i+1)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			f.Apply(logs[i])
		}
	})
	b.Run("payload-hash-only", func(b *testing.B) {
		l := benchEntry(b, 1)
		var dec command.Decoder
		_, cmds, err := dec.Decode(l.Data)
		if err != nil {
			b.Fatal(err)
		}
		var buf []byte
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for j := range cmds {
				_, buf = command.PayloadHash(&cmds[j], buf)
			}
		}
	})
}
