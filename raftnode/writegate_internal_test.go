package raftnode

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func TestPackedAllowed_EveryConfiguredServerMustAdvertiseFormat2(t *testing.T) {
	voter := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter} }
	nonvoter := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Nonvoter} }
	gossip := map[string]gossipMeta{
		"n1":  {ID: "n1", Fmt: 2},
		"n2":  {ID: "n2", Fmt: 2},
		"old": {ID: "old"}, // a binary from before the field: format 1
		"v1":  {ID: "v1", Fmt: 1},
		"v3":  {ID: "v3", Fmt: 3},
	}
	g := func(id string) (gossipMeta, bool) { m, ok := gossip[id]; return m, ok }
	for _, tc := range []struct {
		name    string
		own     uint32
		servers []raft.Server
		ok      bool
		reason  string // substring
	}{
		{"all advertise 2", 2, []raft.Server{voter("n1"), voter("n2"), voter("self")}, true, ""},
		{"newer is fine", 2, []raft.Server{voter("n1"), voter("v3"), voter("self")}, true, ""},
		{"this node is old", 1, []raft.Server{voter("n1"), voter("n2"), voter("self")}, false, "this node applies entry format ≤ 1"},
		{"no configuration", 2, nil, false, "no Raft configuration"},
		{"only this node", 2, []raft.Server{voter("self")}, true, ""},
		{"peer without fmt", 2, []raft.Server{voter("n1"), voter("old"), voter("self")}, false, "server old applies entry format ≤ 1"},
		{"peer advertises 1", 2, []raft.Server{voter("n1"), voter("v1"), voter("self")}, false, "server v1 applies entry format ≤ 1"},
		{"peer never seen", 2, []raft.Server{voter("n1"), voter("ghost"), voter("self")}, false, "server ghost is not known from gossip"},
		{"old non-voter counts too", 2, []raft.Server{voter("n1"), voter("n2"), nonvoter("v1"), voter("self")}, false, "server v1"},
	} {
		ok, reason := packedAllowed(tc.own, "self", tc.servers, g)
		if ok != tc.ok || !strings.Contains(reason, tc.reason) || (ok && reason != "") {
			t.Errorf("%s: packedAllowed = %v %q, want %v %q", tc.name, ok, reason, tc.ok, tc.reason)
		}
	}
	if metaFormat(gossipMeta{}) != 1 || metaFormat(gossipMeta{Fmt: 2}) != 2 {
		t.Error("metaFormat: absent fmt must mean 1")
	}
}
