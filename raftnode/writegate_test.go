package raftnode_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// entryAudit records the format of every command entry one node appends
// to its Raft log, and any entry whose format is not exactly the newest
// its commands need (1, or 2 when it holds a packed ingest).
type entryAudit struct {
	mu       sync.Mutex
	byFormat map[uint32]int
	packed   int // packed ingest commands seen
	bad      []string
}

func (a *entryAudit) check(l *raft.Log) {
	if l.Type != raft.LogCommand {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	body, err := fsm.VerifyEntry(l.Data)
	if err != nil {
		a.bad = append(a.bad, fmt.Sprintf("entry %d: %v", l.Index, err))
		return
	}
	e, err := fsm.DecodeEntry(body)
	if err != nil {
		a.bad = append(a.bad, fmt.Sprintf("entry %d: %v", l.Index, err))
		return
	}
	want, packed := uint32(1), 0
	for _, c := range e.GetCommands() {
		if c.GetIngestPacked() != nil {
			want = fsm.EntryFormatPacked
			packed++
		}
	}
	if e.GetFormat() != want {
		a.bad = append(a.bad, fmt.Sprintf("entry %d: format %d holding %d packed of %d commands", l.Index, e.GetFormat(), packed, len(e.GetCommands())))
	}
	a.byFormat[e.GetFormat()]++
	a.packed += packed
}

func (a *entryAudit) counts() (format1, format2, packed int, bad []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byFormat[1], a.byFormat[2], a.packed, append([]string(nil), a.bad...)
}

// auditStore passes appends through to the log store after auditing them.
type auditStore struct {
	raft.LogStore
	a *entryAudit
}

func (s auditStore) StoreLog(l *raft.Log) error {
	s.a.check(l)
	return s.LogStore.StoreLog(l)
}

func (s auditStore) StoreLogs(ls []*raft.Log) error {
	for _, l := range ls {
		s.a.check(l)
	}
	return s.LogStore.StoreLogs(ls)
}

// packedTotals sums PackedCommands and PackedConverted over the running
// nodes (each counts what it did as leader).
func packedTotals(c *clustertest.Cluster) (packed, converted uint64) {
	for _, i := range c.Running() {
		m := c.Nodes[i].Metrics()
		packed += m.PackedCommands
		converted += m.PackedConverted
	}
	return packed, converted
}

// writeRound commits k ingests spread over every running node (so most
// are forwarded to the leader), concurrently with a stats report and an
// expire, so entries mix command kinds; it returns the largest index.
func writeRound(t *testing.T, c *clustertest.Cluster, tag string, base uint64, k int) uint64 {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var maxIdx uint64
	note := func(idx uint64, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("%s: write: %v", tag, err)
		}
		maxIdx = max(maxIdx, idx)
	}
	run := c.Running()
	for j := 0; j < k; j++ {
		nd := c.Nodes[run[j%len(run)]]
		wg.Add(1)
		go func() {
			defer wg.Done()
			note(nd.Ingest(c.Ctx(10*time.Second), fmt.Sprintf("%s-%d", tag, j), evs(tag, base+uint64(j)*100, 4, time.Now().UnixMilli())))
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		note(c.Nodes[run[0]].ReportStats(c.Ctx(10*time.Second), "", []index.ReplicaStats{{ReplicaID: tag, ModelID: "m", Pressure: 0.5, ObservedAtMs: time.Now().UnixMilli()}}))
	}()
	go func() {
		defer wg.Done()
		note(c.Nodes[run[len(run)-1]].Expire(c.Ctx(10*time.Second), time.Now().UnixMilli()))
	}()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return maxIdx
}

// A cluster with one server that applies only entry format 1 (an older
// binary, simulated with Config.MaxEntryFormat) never writes packed
// entries, even for a packed command a follower forwards: every node
// applies every write and the copies stay identical. Once that server
// runs the new binary, every node opens the gate and ingests are packed.
func TestWriteGate_MixedVersionClusterStaysFormat1UntilEveryServerUpgrades(t *testing.T) {
	var oldFormat atomic.Uint32
	oldFormat.Store(1)
	const old = 2 // n3
	var audits [3]entryAudit
	for i := range audits {
		audits[i].byFormat = map[uint32]int{}
	}
	defer wrapStores(func(i int, s raft.LogStore) raft.LogStore { return auditStore{s, &audits[i]} })()
	checkLogs := func(phase string, wantPacked bool) {
		t.Helper()
		for i := range audits {
			f1, f2, packed, bad := audits[i].counts()
			t.Logf("%s: n%d log: %d format-1 entries, %d format-2 entries, %d packed commands", phase, i+1, f1, f2, packed)
			if len(bad) > 0 {
				t.Fatalf("%s: n%d log holds entries of the wrong format: %v", phase, i+1, bad)
			}
			if (f2 > 0) != wantPacked || (packed > 0) != wantPacked {
				t.Fatalf("%s: n%d log has %d format-2 entries / %d packed commands, want any: %v", phase, i+1, f2, packed, wantPacked)
			}
		}
	}
	c := clustertest.New(t, 3, func(i int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		if i == old {
			cfg.MaxEntryFormat = oldFormat.Load()
		}
	})
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	c.WaitVoters(3, 10*time.Second)
	// Every node sees every other in gossip, and the gate had a full
	// refresh interval to (wrongly) open.
	waitFor(t, "every node to see 3 healthy members", 10*time.Second, func() bool {
		for _, i := range c.Running() {
			healthy := 0
			for _, m := range c.Nodes[i].Status().Members {
				if m.Healthy {
					healthy++
				}
			}
			if healthy != 3 {
				return false
			}
		}
		return true
	})
	time.Sleep(1500 * time.Millisecond)
	for _, i := range c.Running() {
		st := c.Nodes[i].Status()
		want := "server n3 applies entry format ≤ 1"
		if i == old {
			want = "this node applies entry format ≤ 1"
		}
		if st.WriteFormat != 1 || !strings.Contains(st.WriteFormatReason, want) {
			t.Fatalf("%s: WriteFormat %d (%q), want 1 (%q)", st.NodeID, st.WriteFormat, st.WriteFormatReason, want)
		}
	}

	idx := writeRound(t, c, "mixed", 1, 12)
	// A packed command reaches the leader anyway (a follower whose view
	// was newer; here built by hand): through a follower's forward and
	// directly on the leader, it is converted, not written as format 2.
	l := c.WaitLeader(10 * time.Second)
	now := time.Now().UnixMilli()
	pf, err := fsm.MarshalIngestPacked("packed-fwd", evs("packed-fwd", 900000, 4, now))
	if err != nil {
		t.Fatal(err)
	}
	if fsm.CommandFormat(pf) != fsm.EntryFormatPacked {
		t.Fatal("MarshalIngestPacked did not give a format-2 command")
	}
	fi, err := c.Nodes[follower(c, l)].SubmitEncodedForTest(c.Ctx(10*time.Second), pf)
	if err != nil {
		t.Fatalf("packed command forwarded to a closed-gate leader: %v", err)
	}
	pl, _ := fsm.MarshalIngestPacked("packed-local", evs("packed-local", 950000, 4, now))
	li, err := c.Nodes[l].SubmitEncodedForTest(c.Ctx(10*time.Second), pl)
	if err != nil {
		t.Fatalf("packed command on a closed-gate leader: %v", err)
	}
	idx = max(idx, fi, li)
	assertSameDigest(t, c, idx)
	for _, i := range c.Running() {
		for _, base := range []uint64{900000, 950000} {
			if res := lookup(c.Nodes[i], base, 4, now); res.Reason != index.PrefixMatch {
				t.Fatalf("%s did not apply the converted packed write at %d: %+v", c.Nodes[i].ID, base, res)
			}
		}
	}
	packed, converted := packedTotals(c)
	if packed != 0 || converted < 2 {
		t.Fatalf("with an old server: %d packed commands written, %d converted; want 0 and ≥ 2", packed, converted)
	}
	t.Logf("mixed versions: up to index %d, 0 packed, %d packed commands converted by the leader", idx, converted)
	checkLogs("mixed versions", false)

	// Upgrade n3: same data, the new binary's default format.
	c.Stop(old)
	oldFormat.Store(0)
	start := time.Now()
	c.Start(old)
	stuck := ""
	t.Cleanup(func() {
		if t.Failed() && stuck != "" {
			t.Log("last node not writing format 2: " + stuck)
		}
	})
	waitFor(t, "every node to write format 2", 15*time.Second, func() bool {
		for _, i := range c.Running() {
			if st := c.Nodes[i].Status(); st.WriteFormat != fsm.EntryFormatPacked {
				stuck = fmt.Sprintf("%s: format %d (%s), members %+v", st.NodeID, st.WriteFormat, st.WriteFormatReason, st.Members)
				return false
			}
		}
		stuck = ""
		return true
	})
	t.Logf("gate open on every node %v after n3 restarted with format 2", time.Since(start))
	l = c.WaitLeader(10 * time.Second)
	leaderPacked := c.Nodes[l].Metrics().PackedCommands
	_, convBefore := packedTotals(c)
	idx = writeRound(t, c, "upgraded", 2000000, 12)
	pf, _ = fsm.MarshalIngestPacked("packed-fwd-2", evs("packed-fwd-2", 3000000, 4, now))
	fi, err = c.Nodes[follower(c, l)].SubmitEncodedForTest(c.Ctx(10*time.Second), pf)
	if err != nil {
		t.Fatal(err)
	}
	idx = max(idx, fi)
	assertSameDigest(t, c, idx)
	if got := c.Nodes[l].Metrics().PackedCommands - leaderPacked; got < 13 {
		t.Fatalf("leader %s wrote %d packed commands after the upgrade, want ≥ 13 (12 ingests + 1 forwarded)", c.Nodes[l].ID, got)
	}
	if _, conv := packedTotals(c); conv != convBefore {
		t.Fatalf("%d packed commands converted with every server on format 2", conv-convBefore)
	}
	for _, i := range c.Running() {
		if res := lookup(c.Nodes[i], 3000000, 4, now); res.Reason != index.PrefixMatch {
			t.Fatalf("%s: packed write not applied: %+v", c.Nodes[i].ID, res)
		}
	}
	checkLogs("upgraded", true)
}

// A server running an older release (one that applies only format 1) is
// not added to a cluster of this release, neither by the leader from
// gossip nor by an operator's AddServer: it would refuse the format-2
// entries it replays and diverge.
func TestWriteGate_OlderServerNotAdded(t *testing.T) {
	c := clustertest.New(t, 3, func(i int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		if i == 3 {
			cfg.MaxEntryFormat = 1
		}
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	c.WaitVoters(3, 10*time.Second)
	c.AddNode()
	c.Start(3)
	old := c.Nodes[3]
	// Gossip must know it before the refusal is meaningful.
	deadline := time.Now().Add(10 * time.Second)
	for {
		known := false
		for _, m := range c.Nodes[l].Status().Members {
			known = known || m.ID == old.ID
		}
		if known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the older server never showed up in gossip")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // several reconcile rounds
	for _, m := range c.Nodes[l].Status().Members {
		if m.ID == old.ID && m.Suffrage != "" {
			t.Fatalf("older server was added to the configuration as %s", m.Suffrage)
		}
	}
	_, err := c.Nodes[l].AddServer(c.Ctx(5*time.Second), old.ID, old.RaftAddr, true)
	if !errors.Is(err, raftnode.ErrInvalid) || !strings.Contains(err.Error(), "applies log entry format ≤ 1") {
		t.Fatalf("AddServer of the older server: %v, want ErrInvalid naming its format", err)
	}
	if st := c.Nodes[l].Status(); st.WriteFormat != 2 {
		t.Fatalf("leader writes format %d (%s) with the older server outside the configuration, want 2", st.WriteFormat, st.WriteFormatReason)
	}
}
