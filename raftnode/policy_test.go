package raftnode_test

import (
	"errors"
	"testing"
	"time"

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
