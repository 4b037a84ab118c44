package raftnode

import (
	"maps"
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
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pending := map[string]opRemoval{
		"a": {nonce: "p1", at: now},
		"b": {nonce: "q1", at: now},
		"c": {nonce: "r1", at: now.Add(-opRemovalTTL - time.Second)},
	}
	removed := map[string]string{}
	settled := takeOpRemovals(pending, map[string]string{"b": "q1", "c": "r1"}, removed, now)
	if d := cmp.Diff(map[string]string{"a": "p1"}, removed); d != "" {
		t.Fatalf("removed (-want +got):\n%s", d)
	}
	// b: its removal is not in the configuration yet, so it stays pending;
	// c: it never showed and is past its TTL.
	if d := cmp.Diff([]string{"a", "c"}, settled); d != "" {
		t.Fatalf("settled (-want +got):\n%s", d)
	}
}

// The records a round decides by are the log's overlaid by the node's
// own, which are the newer where both name a server; neither input is
// changed.
func TestRemovalRecords(t *testing.T) {
	local := map[string]string{"n2": "new", "n4": "d"}
	logged := map[string]string{"n2": "old", "n3": "c"}
	got := removalRecords(local, logged)
	want := map[string]string{"n2": "new", "n3": "c", "n4": "d"}
	if !maps.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	if !maps.Equal(local, map[string]string{"n2": "new", "n4": "d"}) || !maps.Equal(logged, map[string]string{"n2": "old", "n3": "c"}) {
		t.Fatalf("inputs changed: local %v, logged %v", local, logged)
	}
	if got := removalRecords(local, nil); !maps.Equal(got, local) {
		t.Fatalf("without logged records: %v, want the node's own %v", got, local)
	}
	if got := removalRecords(nil, logged); !maps.Equal(got, logged) {
		t.Fatalf("without the node's own: %v, want the log's %v", got, logged)
	}
}
