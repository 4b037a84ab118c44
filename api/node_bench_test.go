package api

import (
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// BenchmarkNodeBackend_ReadState: the read state every lookup takes from
// a real node (a one-node cluster, leader), including the clock offset
// and correction.
func BenchmarkNodeBackend_ReadState(b *testing.B) {
	c := clustertest.New(b, 1, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = -1 })
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	be := NewNodeBackend(c.Nodes[0].Node)
	b.ReportAllocs()
	b.ResetTimer()
	var n uint64
	for i := 0; i < b.N; i++ {
		n += be.ReadState().AppliedIndex
	}
	_ = n
}
