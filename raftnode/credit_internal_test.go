package raftnode

import (
	"testing"

	"github.com/inference-cache/inference-cache/index"
)

// Credit queues what the lookup's index named without reading the policy
// (the index decides, and the policy copy cost a map clone per credited
// lookup): a node with no state machine at all still queues it, a copy
// of the caller's hashes, and one queued credit costs one allocation.
func TestCredit_QueuesWithoutReadingThePolicy(t *testing.T) {
	n := &Node{creditCh: make(chan creditReq, 1)}
	p := index.Partition{Scheme: "vllm", Model: "m"}
	hs := []uint64{1, 2}
	n.Credit(p, hs)
	hs[0] = 9
	select {
	case c := <-n.creditCh:
		if c.p != p || len(c.hashes) != 2 || c.hashes[0] != 1 || c.hashes[1] != 2 {
			t.Fatalf("queued %+v, want %v [1 2] (a copy)", c, p)
		}
	default:
		t.Fatal("nothing queued")
	}
	allocs := testing.AllocsPerRun(100, func() {
		n.Credit(p, hs)
		<-n.creditCh
	})
	if allocs != 1 {
		t.Fatalf("%v allocations per credit, want 1 (the copy of the hashes)", allocs)
	}
}
