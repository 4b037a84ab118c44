package raftnode

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

func TestTrackRemovals(t *testing.T) {
	cfg := func(ids ...string) raft.Configuration {
		var c raft.Configuration
		for _, id := range ids {
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
		}
		return c
	}
	alive := func(nonce string) member { return member{alive: true, meta: gossipMeta{Nonce: nonce}} }
	for _, tc := range []struct {
		name        string
		prev        map[string]string
		cfg         raft.Configuration
		gossip      map[string]member
		removed     map[string]string
		wantRemoved map[string]string
		wantCur     map[string]string
	}{
		{
			name: "a live server removed is recorded under its process's nonce",
			prev: map[string]string{"a": "p1", "b": "q1"}, cfg: cfg("b"),
			gossip:      map[string]member{"a": alive("p1"), "b": alive("q1")},
			wantRemoved: map[string]string{"a": "p1"}, wantCur: map[string]string{"b": "q1"},
		},
		{
			// A supervisor removed it and started it again, wiped, within
			// one tick: the record names the process that was removed, so
			// the new one is added back.
			name: "restarted within the tick: the previous tick's nonce is recorded",
			prev: map[string]string{"a": "p1", "b": "q1"}, cfg: cfg("b"),
			gossip:      map[string]member{"a": alive("p2"), "b": alive("q1")},
			wantRemoved: map[string]string{"a": "p1"}, wantCur: map[string]string{"b": "q1"},
		},
		{
			name: "dead at the previous tick (dead server cleanup): not recorded",
			prev: map[string]string{"a": "", "b": "q1"}, cfg: cfg("b"),
			gossip:      map[string]member{"b": alive("q1")},
			wantRemoved: map[string]string{}, wantCur: map[string]string{"b": "q1"},
		},
		{
			name: "back in the configuration: the record is dropped",
			prev: map[string]string{"b": "q1"}, cfg: cfg("a", "b"), removed: map[string]string{"a": "p1"},
			gossip:      map[string]member{"a": alive("p1"), "b": alive("q1")},
			wantRemoved: map[string]string{}, wantCur: map[string]string{"a": "p1", "b": "q1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			removed := tc.removed
			if removed == nil {
				removed = map[string]string{}
			}
			cur := trackRemovals(tc.prev, tc.cfg, tc.gossip, removed)
			if d := cmp.Diff(tc.wantRemoved, removed); d != "" {
				t.Errorf("removed (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantCur, cur); d != "" {
				t.Errorf("returned configuration (-want +got):\n%s", d)
			}
		})
	}
}

// A RemoveServer this node made is recorded once its server has left the
// configuration, under the nonce gossip showed when it was called; one
// whose removal never showed is dropped after opRemovalTTL.
func TestTakeOpRemovals(t *testing.T) {
	var n Node
	n.opRemoved.Store("a", opRemoval{nonce: "p1", at: time.Now()})
	n.opRemoved.Store("b", opRemoval{nonce: "q1", at: time.Now()})
	n.opRemoved.Store("c", opRemoval{nonce: "r1", at: time.Now().Add(-opRemovalTTL - time.Second)})
	removed := map[string]string{}
	n.takeOpRemovals(map[string]string{"b": "q1", "c": "r1"}, removed)
	if d := cmp.Diff(map[string]string{"a": "p1"}, removed); d != "" {
		t.Fatalf("removed (-want +got):\n%s", d)
	}
	if _, ok := n.opRemoved.Load("b"); !ok {
		t.Fatal("a removal not yet in the configuration was dropped")
	}
	if _, ok := n.opRemoved.Load("c"); ok {
		t.Fatal("a removal that never showed was kept past its TTL")
	}
}
