package raftnode

import (
	"io"
	"log"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/tlsconfig"
	"github.com/inference-cache/inference-cache/tlsconfig/tlstest"
)

func testPKI(t *testing.T) tlstest.Set {
	t.Helper()
	s, err := tlstest.WriteSet(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func raftTLS(t *testing.T, cert, key, ca string) *RaftTLS {
	t.Helper()
	r, err := tlsconfig.NewReloader(tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: ca}, tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := r.ServerConfig(tlsconfig.ClientAuthRequireAndVerify)
	if err != nil {
		t.Fatal(err)
	}
	return &RaftTLS{Server: srv, Client: r.ClientConfig("")}
}

func tlsTransport(t *testing.T, rt *RaftTLS) *raft.NetworkTransport {
	t.Helper()
	tr, err := newTLSTransport("127.0.0.1:0", nil, rt, &raft.NetworkTransportConfig{MaxPool: 1, Timeout: 3 * time.Second, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestRaftTLS_TransportRPCsOnlyBetweenCertificatesOfTheCA sends a real
// RequestVote over the Raft NetworkTransport with the TLS stream layer.
func TestRaftTLS_TransportRPCsOnlyBetweenCertificatesOfTheCA(t *testing.T) {
	s := testPKI(t)
	server := tlsTransport(t, raftTLS(t, s.NodeCert, s.NodeKey, s.CA))
	go func() {
		for rpc := range server.Consumer() {
			rpc.Respond(&raft.RequestVoteResponse{Term: 7, Granted: true}, nil)
		}
	}()
	vote := func(rt *RaftTLS) error {
		c := tlsTransport(t, rt)
		var resp raft.RequestVoteResponse
		err := c.RequestVote("srv", server.LocalAddr(), &raft.RequestVoteRequest{Term: 7}, &resp)
		if err == nil && (resp.Term != 7 || !resp.Granted) {
			t.Fatalf("response %+v", resp)
		}
		return err
	}
	if err := vote(raftTLS(t, s.NodeCert, s.NodeKey, s.CA)); err != nil {
		t.Fatalf("peer of the same CA: %v", err)
	}
	noCert := raftTLS(t, s.NodeCert, s.NodeKey, s.CA)
	r, _ := tlsconfig.NewReloader(tlsconfig.Files{CAFile: s.CA}, tlsconfig.Options{})
	noCert.Client = r.ClientConfig("")
	for name, rt := range map[string]*RaftTLS{
		"peer cert of another CA": raftTLS(t, s.OtherCert, s.OtherKey, s.CA),
		"expired peer cert":       raftTLS(t, s.ExpiredCert, s.ExpiredKey, s.CA),
		"no client cert":          noCert,
		"peer trusts another CA":  raftTLS(t, s.NodeCert, s.NodeKey, s.OtherCA),
	} {
		if err := vote(rt); err == nil {
			t.Errorf("%s: RPC accepted", name)
		}
	}
	// A plaintext Raft peer is refused too.
	plain, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, 3*time.Second, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var resp raft.RequestVoteResponse
	if err := plain.RequestVote("srv", server.LocalAddr(), &raft.RequestVoteRequest{Term: 7}, &resp); err == nil {
		t.Error("plaintext peer: RPC accepted")
	}
}

func gossipMember(t *testing.T, name string, keys [][]byte) *memberlist.Memberlist {
	t.Helper()
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = name, "127.0.0.1", 0
	mc.Logger = log.New(io.Discard, "", 0)
	n := &Node{cfg: Config{GossipKeys: keys}}
	if err := n.gossipEncryption(mc); err != nil {
		t.Fatal(err)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	return ml
}

func TestGossipKeys_OnlyMembersWithAMatchingKeyJoin(t *testing.T) {
	k := func(b byte) []byte {
		key := make([]byte, 32)
		for i := range key {
			key[i] = b
		}
		return key
	}
	k1, k2 := k(1), k(2)
	seed := gossipMember(t, "seed", [][]byte{k1})
	addr := seed.LocalNode().Address()
	cases := []struct {
		name string
		keys [][]byte
		join bool
	}{
		{"same key", [][]byte{k1}, true},
		{"rotation step 1: same primary, new key also accepted", [][]byte{k1, k2}, true},
		{"new primary the seed does not hold yet", [][]byte{k2, k1}, false},
		{"other key", [][]byte{k2}, false},
		{"no key (plaintext)", nil, false},
	}
	for i, c := range cases {
		m := gossipMember(t, "m"+string(rune('a'+i)), c.keys)
		_, err := m.Join([]string{addr})
		if c.join && err != nil {
			t.Errorf("%s: join failed: %v", c.name, err)
		}
		if !c.join && err == nil {
			t.Errorf("%s: joined a cluster whose key it does not share", c.name)
		}
	}
	if got := seed.NumMembers(); got != 3 {
		t.Errorf("seed sees %d members, want 3 (itself and the two members holding its key)", got)
	}
	if err := (&Node{cfg: Config{GossipKeys: [][]byte{[]byte("short")}}}).gossipEncryption(memberlist.DefaultLocalConfig()); err == nil {
		t.Error("a 5-byte key was accepted")
	}
}
