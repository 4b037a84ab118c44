package raftnode_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
)

func TestFourthNodeJoinsAsVoter(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	c.WaitVoters(3, 10*time.Second)
	c.AddNode() // same command line: bootstrap_expect=3, join list
	c.Start(3)
	ids := c.WaitVoters(4, 15*time.Second)
	t.Logf("voters %v", ids)
	l := c.WaitLeader(10 * time.Second)
	idx, err := appliedAt(c.Nodes[3].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 4, time.Now().UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	_ = l
	assertSameDigest(t, c, idx)
}

func TestDeadServerCleanup_NeverBelowThreeVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("waits on gossip's failure detection and the cleanup's grace period twice (~10 s); the full tier runs it")
	}
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.DeadServerCleanup = 500 * time.Millisecond
	})
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	c.AddNode()
	c.Start(3)
	c.WaitVoters(4, 15*time.Second)
	l := c.WaitLeader(10 * time.Second)
	victims := []int{}
	for _, i := range c.Running() {
		if i != l && len(victims) < 2 {
			victims = append(victims, i)
		}
	}
	c.Kill(victims[0])
	// Gossip must call it dead, then the grace period pass, on a machine
	// that may be running other packages' tests: allow for a slow verdict.
	ids := c.WaitVoters(3, 30*time.Second)
	t.Logf("after one dead: voters %v", ids)
	c.Kill(victims[1]) // 3 voters, 1 dead: cleanup must not remove it
	// Wait for the verdict the cleanup acts on (gossip calls it dead),
	// then for the grace period, then for two reconcile rounds that
	// started after it: each of them had the server dead past its grace.
	dead := c.Nodes[victims[1]].ID
	poll.Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		l := c.WaitLeader(10 * time.Second)
		for _, m := range c.Nodes[l].Status().Members {
			if m.ID == dead {
				return !m.Healthy, fmt.Sprintf("leader %s still sees %s healthy, want gossip to report it dead", c.Nodes[l].ID, dead)
			}
		}
		return true, ""
	})
	// The grace period is wall time the cleanup must let pass; the
	// reconcile rounds counted after it are the signal that the cleanup
	// had its chance, so this sleep is not the wait before the assertion.
	time.Sleep(500 * time.Millisecond)
	r0 := reconcileRounds(c)
	poll.Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		r := reconcileRounds(c)
		return r >= r0+2, fmt.Sprintf("%d reconcile rounds past the grace period, want 2", r-r0)
	})
	l = c.WaitLeader(10 * time.Second)
	n := 0
	for _, m := range c.Nodes[l].Status().Members {
		if m.Suffrage == "Voter" {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("cleanup went below 3 voters: %d", n)
	}
}

func TestCleanupBudget(t *testing.T) {
	for _, tc := range []struct{ voters, dead, want int }{
		{3, 1, 0}, {4, 1, 1}, {4, 2, 1}, {5, 1, 1}, {5, 2, 2}, {5, 3, 2}, {7, 3, 3}, {7, 5, 3}, {2, 1, 0},
	} {
		if got := raftnode.CleanupBudget(tc.voters, tc.dead); got != tc.want {
			t.Errorf("CleanupBudget(%d voters, %d dead) = %d, want %d", tc.voters, tc.dead, got, tc.want)
		}
	}
}

// A follower an operator removes while its process keeps running is not
// added back by the leader's reconcile, though gossip shows it alive with
// Raft state; once that process is gone and the server is started again
// under the same id with an empty data dir (a new process: a new gossip
// nonce), it is added back as a voter and catches up.
func TestRemoveServer_LiveProcessStaysOutRestartedOneIsReadded(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	c, l, f := threeVoters(t)
	id := c.Nodes[f].ID
	if _, err := c.Nodes[l].RemoveServer(c.Ctx(5*time.Second), id); err != nil {
		t.Fatal(err)
	}
	// Only the leader reconciles; the removed node, which no longer
	// agrees on a leader, is left out of the sum.
	rounds := func() uint64 {
		var n uint64
		for _, i := range c.Running() {
			if i != f {
				n += c.Nodes[i].ReconcileRoundsForTest()
			}
		}
		return n
	}
	r0 := rounds()
	poll.Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		r := rounds()
		return r >= r0+5, fmt.Sprintf("%d reconcile rounds after the removal, want 5", r-r0)
	})
	for _, i := range c.Running() {
		if i == f {
			continue
		}
		for _, m := range c.Nodes[i].Status().Members {
			if m.ID != id {
				continue
			}
			if m.Suffrage != "" {
				t.Fatalf("%s re-added as %s while the removed process runs (seen from %s)", id, m.Suffrage, c.Nodes[i].ID)
			}
			if m.UnhealthyReason == "gossip: not alive" || m.UnhealthyReason == "not seen in gossip" {
				t.Fatalf("%s not alive in gossip (%s): the test did not exercise a live removed process", id, m.UnhealthyReason)
			}
		}
	}

	c.Kill(f)
	if err := os.RemoveAll(c.Nodes[f].Dir); err != nil {
		t.Fatal(err)
	}
	c.Start(f)
	ids := c.WaitVoters(3, 30*time.Second)
	if !slices.Contains(ids, id) {
		t.Fatalf("voters %v lack the restarted %s", ids, id)
	}
	l = c.WaitLeader(10 * time.Second)
	// The record kept the old process out; the new one is a voter, so
	// the record is forgotten, through the log, on every node.
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		for _, i := range c.Running() {
			if r, held := c.Nodes[i].RemovalRecordsForTest()[id]; held {
				return false, fmt.Sprintf("%s still holds the removal record %s=%s", c.Nodes[i].ID, id, r)
			}
		}
		return true, ""
	})
	idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 4, time.Now().UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c, idx)
}

// The removal of a running process is known to every node, not only the
// leader that made it: after a leadership transfer the new leader does
// not add the removed process back either.
func TestRemoveServer_NewLeaderDoesNotReaddTheLiveProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	c, l, other, id := removeRunningFollower(t)
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		for _, m := range c.Nodes[other].Status().Members {
			if m.ID == id {
				return m.Suffrage == "", fmt.Sprintf("%s still has %s as %s, want the removal applied", c.Nodes[other].ID, id, m.Suffrage)
			}
		}
		return true, ""
	})
	if err := c.Nodes[l].TransferLeadership(c.Ctx(5*time.Second), c.Nodes[other].ID, ""); err != nil {
		t.Fatal(err)
	}
	nl := c.Nodes[other]
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		st := nl.Status().State
		return st == "Leader", fmt.Sprintf("%s is %s after the transfer, want Leader", nl.ID, st)
	})
	r0 := nl.ReconcileRoundsForTest()
	poll.Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		r := nl.ReconcileRoundsForTest()
		return r >= r0+5, fmt.Sprintf("%d reconcile rounds on the new leader, want 5", r-r0)
	})
	// Leadership may move again under a loaded machine (two voters
	// left): whichever node leads, none may have added the process back.
	for _, n := range []int{l, other} {
		for _, m := range c.Nodes[n].Status().Members {
			if m.ID == id && m.Suffrage != "" {
				t.Fatalf("%s (%s) has %s back as %s while the removed process runs", c.Nodes[n].ID, c.Nodes[n].Status().State, id, m.Suffrage)
			}
		}
	}
}

// The removal of a running process is recorded through the log, so a node
// that never saw the server leave, here one restarted after the removal
// (its memory holds no record), does not add the removed process back
// once it leads.
func TestRemoveServer_RestartedNodeLeadsAndDoesNotReaddTheLiveProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	c, l, other, id := removeRunningFollower(t)
	c.Stop(other)
	c.Start(other)
	// The restarted node leads for 3 reconcile rounds (its count starts
	// at its restart); leadership may move back under a loaded machine,
	// so it is handed over again while another node leads.
	nl := c.Nodes[other]
	poll.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		st, r := nl.Status().State, nl.ReconcileRoundsForTest()
		if st == "Leader" && r >= 3 {
			return true, ""
		}
		if st != "Leader" && c.Nodes[l].Status().State == "Leader" {
			_ = c.Nodes[l].TransferLeadership(c.Ctx(2*time.Second), nl.ID, "")
		}
		return false, fmt.Sprintf("%s is %s after %d reconcile rounds as leader, want Leader after 3", nl.ID, st, r)
	})
	for _, n := range []int{l, other} {
		for _, m := range c.Nodes[n].Status().Members {
			if m.ID != id {
				continue
			}
			if m.Suffrage != "" {
				t.Fatalf("%s (%s) has %s back as %s while the removed process runs", c.Nodes[n].ID, c.Nodes[n].Status().State, id, m.Suffrage)
			}
			if m.UnhealthyReason == "gossip: not alive" || m.UnhealthyReason == "not seen in gossip" {
				t.Fatalf("%s not alive in gossip (%s): the test did not exercise a live removed process", id, m.UnhealthyReason)
			}
		}
	}
}

// removeRunningFollower starts a 3-node cluster and has its leader l
// remove a follower whose process keeps running: the removed server's id,
// and other, the node that is neither.
func removeRunningFollower(t *testing.T) (c *clustertest.Cluster, l, other int, id string) {
	t.Helper()
	c, l, f := threeVoters(t)
	other, id = 3-l-f, c.Nodes[f].ID
	if _, err := c.Nodes[l].RemoveServer(c.Ctx(5*time.Second), id); err != nil {
		t.Fatal(err)
	}
	return c, l, other, id
}

// An operator's AddServer is refused, naming the rule and changing
// nothing, for an id that breaks contract §9.2 (a space, a control
// character, over 128 bytes) and for a Raft address another member
// already has; raft itself would take the first and answer the second
// with an internal error.
func TestAddServer_RefusesBadIdsAndATakenAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	c, l, f := threeVoters(t)
	var taken string
	for _, m := range c.Nodes[l].Status().Members {
		if m.ID == c.Nodes[f].ID {
			taken = m.RaftAddr
		}
	}
	for _, tc := range []struct{ id, addr, want string }{
		{"bad id", "127.0.0.1:5", "only printable characters without spaces"},
		{"ctl\x01", "127.0.0.1:5", "only printable characters without spaces"},
		{strings.Repeat("x", 129), "127.0.0.1:5", "129 bytes, over the limit of 128"},
		{"dup", taken, "is already server"},
	} {
		_, err := c.Nodes[l].AddServer(c.Ctx(5*time.Second), tc.id, tc.addr, false)
		if !errors.Is(err, raftnode.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddServer(%q, %q): %v, want ErrInvalid saying %q", tc.id, tc.addr, err, tc.want)
		}
	}
	if n := len(c.Nodes[l].Status().Members); n != 3 {
		t.Errorf("%d members after the refusals, want 3", n)
	}
}
