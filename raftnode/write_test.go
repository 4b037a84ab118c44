package raftnode_test

import (
	"errors"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// An invalid policy handed to SetPolicy is refused by the apply, where
// every node checks it alike: the node does not keep a third copy of the
// rule. The refusal names the knob, and the policy in force (its version
// too) is unchanged everywhere.
func TestSetPolicy_InvalidPolicyIsRefusedAtApply(t *testing.T) {
	c := clustertest.New(t, 1, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	before := c.Nodes[l].Policy()
	p := before.Clone()
	p.MaxReplicas = 0
	_, err := c.Nodes[l].SetPolicy(c.Ctx(5*time.Second), p)
	var fe *policy.FieldError
	if !errors.Is(err, raftnode.ErrRejected) || !errors.As(err, &fe) || fe.Field != "maxReplicas" {
		t.Fatalf("SetPolicy(maxReplicas 0): %v, want ErrRejected from the apply naming maxReplicas", err)
	}
	if got := c.Nodes[l].Policy(); got.Version != before.Version || got.MaxReplicas != before.MaxReplicas {
		t.Fatalf("policy after the refusal: version %d maxReplicas %d, want %d %d", got.Version, got.MaxReplicas, before.Version, before.MaxReplicas)
	}
}

// A write without a request id gets a fresh one from the node (the one
// place ids are made): the same events sent twice without an id are two
// writes, each applied, neither a duplicate of the other.
func TestIngest_NoRequestIDIsAFreshWriteEachTime(t *testing.T) {
	c := clustertest.New(t, 1, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	now := time.Now().UnixMilli()
	w1, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 4, now))
	if err != nil {
		t.Fatal(err)
	}
	w2, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 4, now))
	if err != nil {
		t.Fatal(err)
	}
	if w1.Duplicate || w2.Duplicate || w2.Index <= w1.Index {
		t.Fatalf("two writes without an id: %+v then %+v, want two applied writes", w1, w2)
	}
	st := []index.ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: now}}
	s1, err := c.Nodes[l].ReportStats(c.Ctx(5*time.Second), "", st)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Nodes[l].ReportStats(c.Ctx(5*time.Second), "", st)
	if err != nil || s2.Duplicate || s2.Index <= s1.Index {
		t.Fatalf("two stats writes without an id: %+v then %+v (%v), want two applied writes", s1, s2, err)
	}
}
