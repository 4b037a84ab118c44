package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Monitor polls Cluster.Status and Cluster.Digest on every Up node for the
// whole run: it records which node claimed leadership in which term (two
// different nodes claiming one term is a violation), keeps the workload's
// leader hint current, and records the digest every node reported at each
// applied index (two different digests at one index is a violation).
type Monitor struct {
	c *Cluster
	w *Workload

	mu            sync.Mutex
	leaders       map[uint64]string // term → self-declared leader
	twoLeaders    []string
	digests       map[uint64]digestSeen
	digestClashes []string
	statusPolls   int
	digestPolls   int

	stop context.CancelFunc
	wg   sync.WaitGroup
}

type digestSeen struct {
	digest uint64
	node   string
}

// NewMonitor returns a monitor of c (Start it).
func NewMonitor(c *Cluster) *Monitor {
	return &Monitor{c: c, leaders: map[uint64]string{}, digests: map[uint64]digestSeen{}}
}

// Start polls Status every 50 ms and Digest every 300 ms on every node
// until Stop. w (optional) receives the leader hint.
func (m *Monitor) Start(ctx context.Context, w *Workload) {
	m.w = w
	ctx, m.stop = context.WithCancel(ctx)
	for _, n := range m.c.Nodes {
		m.wg.Add(1)
		go m.poll(ctx, n)
	}
}

// Stop stops polling.
func (m *Monitor) Stop() {
	if m.stop != nil {
		m.stop()
	}
	m.wg.Wait()
}

func (m *Monitor) poll(ctx context.Context, n *Node) {
	defer m.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s, _ := n.State(); s != Up {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err := n.CL.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil {
			m.observeStatus(n, st)
		}
		if i%6 == 0 {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			d, err := n.CL.Digest(cctx, &pb.DigestRequest{})
			cancel()
			if err == nil {
				m.ObserveDigest(n.ID, d.AppliedIndex, d.Digest)
			}
		}
	}
}

func (m *Monitor) observeStatus(n *Node, st *pb.StatusResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.statusPolls++
	if st.State == "Leader" {
		if prev, ok := m.leaders[st.Term]; ok && prev != st.NodeId {
			m.twoLeaders = append(m.twoLeaders, fmt.Sprintf("term %d: %s and %s both reported state Leader", st.Term, prev, st.NodeId))
		} else if !ok {
			m.leaders[st.Term] = st.NodeId
		}
		if m.w != nil {
			m.w.leaderHint.Store(int32(n.Index))
		}
	}
}

// ObserveDigest records that node reported digest at applied index idx.
func (m *Monitor) ObserveDigest(node string, idx, digest uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.digestPolls++
	if prev, ok := m.digests[idx]; ok {
		if prev.digest != digest {
			m.digestClashes = append(m.digestClashes, fmt.Sprintf("applied index %d: %s digest %016x, %s digest %016x", idx, prev.node, prev.digest, node, digest))
		}
		return
	}
	m.digests[idx] = digestSeen{digest, node}
}

// Results returns the violations found and the poll counts.
func (m *Monitor) Results() (twoLeaders, digestClashes []string, terms, statusPolls, digestPolls int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.twoLeaders...), append([]string(nil), m.digestClashes...), len(m.leaders), m.statusPolls, m.digestPolls
}
