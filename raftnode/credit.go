package raftnode

import (
	"context"
	"slices"
	"time"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/index"
)

// LFU access credits (contract §5.9): collected from lookups, batched per
// partition and committed through the log off the lookup path.

type creditReq struct {
	p      index.Partition
	hashes []uint64
}

// Credit queues LFU access credits for blocks of partition p (contract §5):
// the hashes a lookup's index.Result names in CreditHashes, which the
// index fills only for a delivered PREFIX_MATCH under LFU. The index owns
// that decision, here and at apply (index.Index.Credit ignores credits
// once the policy is no longer LFU), so Credit does not read the policy.
// It never blocks: credits are batched for ~100 ms and committed through
// the log; under overload or failure they are dropped. hashes is copied.
func (n *Node) Credit(p index.Partition, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	select {
	case n.creditCh <- creditReq{p: p, hashes: slices.Clone(hashes)}:
	default:
		n.metrics.creditsDropped.Add(1)
	}
}

func (n *Node) creditLoop() {
	defer n.wg.Done()
	t := time.NewTicker(creditFlush)
	defer t.Stop()
	pending := map[index.Partition][]uint64{}
	for {
		select {
		case c := <-n.creditCh:
			pending[c.p] = append(pending[c.p], c.hashes...)
		case <-t.C:
			for p, hs := range pending {
				delete(pending, p)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if _, err := n.submit(ctx, command.CreditCommand(n.NewRequestID(), p, hs)); err != nil {
					n.metrics.creditsDropped.Add(1)
				}
				cancel()
			}
		case <-n.shutdownCh:
			return
		}
	}
}
