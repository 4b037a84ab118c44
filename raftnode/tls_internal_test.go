package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/internal/poll"
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
	ml, _ := gossipNode(t, name, keys)
	return ml
}

// gossipNode is gossipMember that also returns the Node whose keyring the
// memberlist uses (for SetGossipKeys).
func gossipNode(t *testing.T, name string, keys [][]byte) (*memberlist.Memberlist, *Node) {
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
	return ml, n
}

// gossipKey is a 32-byte key of b repeated.
func gossipKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestGossipKeys_OnlyMembersWithAMatchingKeyJoin(t *testing.T) {
	k1, k2 := gossipKey(1), gossipKey(2)
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

// A key change at runtime: every member takes the new key second, then
// first, then drops the old one, with no restart. Afterwards a newcomer
// holding only the new key joins and is gossiped to everyone, and one
// holding only the old key is refused.
func TestSetGossipKeys_RotatesWithoutRestart(t *testing.T) {
	oldK, newK := gossipKey(1), gossipKey(2)
	seed, seedN := gossipNode(t, "seed", [][]byte{oldK})
	m, mN := gossipNode(t, "m", [][]byte{oldK})
	if _, err := m.Join([]string{seed.LocalNode().Address()}); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][][]byte{{oldK, newK}, {newK, oldK}, {newK}} {
		for _, n := range []*Node{seedN, mN} {
			if err := n.SetGossipKeys(step); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := seedN.mlKeyring.GetPrimaryKey(); !bytes.Equal(got, newK) {
		t.Fatal("primary key is not the new key after the rotation")
	}
	if n := len(seedN.mlKeyring.GetKeys()); n != 1 {
		t.Fatalf("keyring holds %d keys after dropping the old one, want 1", n)
	}
	stale := gossipMember(t, "stale", [][]byte{oldK})
	if _, err := stale.Join([]string{seed.LocalNode().Address()}); err == nil {
		t.Fatal("a member holding only the dropped key joined")
	}
	fresh := gossipMember(t, "fresh", [][]byte{newK})
	if _, err := fresh.Join([]string{seed.LocalNode().Address()}); err != nil {
		t.Fatalf("a member holding only the new key could not join: %v", err)
	}
	// m learns of fresh only through gossip encrypted with the new key.
	poll.Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		sn, mn := seed.NumMembers(), m.NumMembers()
		return sn == 3 && mn == 3, fmt.Sprintf("members after rotation: seed sees %d, m sees %d; want 3 each", sn, mn)
	})
}

func TestSetGossipKeys_RefusalsLeaveTheKeyringAsItWas(t *testing.T) {
	key := make([]byte, 16)
	_, n := gossipNode(t, "a", [][]byte{key})
	for name, keys := range map[string][][]byte{
		"none":            nil,
		"short key":       {key, []byte("short")},
		"short primary":   {[]byte("short")},
		"33-byte key too": {make([]byte, 33)},
	} {
		if err := n.SetGossipKeys(keys); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		if ks := n.mlKeyring.GetKeys(); len(ks) != 1 || !bytes.Equal(ks[0], key) {
			t.Errorf("%s: keyring changed by a refused call", name)
		}
	}
	_, plain := gossipNode(t, "b", nil)
	if err := plain.SetGossipKeys([][]byte{key}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "off") {
		t.Errorf("node without gossip encryption: err = %v, want ErrInvalid saying encryption is off", err)
	}
}

// memberlist logs through a *log.Logger with the level in the text; those
// lines must arrive at their own level (a wrong gossip key is an [ERR]
// line, which an operator must see at the default level, not as DEBUG).
func TestMemberlistLogger_KeepsMemberlistLevels(t *testing.T) {
	var buf bytes.Buffer
	n := &Node{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ml := n.memberlistLogger()
	ml.Printf("[ERR] memberlist: failed to join 127.0.0.1:1: no installed keys could decrypt the message")
	ml.Printf("[WARN] memberlist: refuting a suspect message")
	ml.Printf("[DEBUG] memberlist: stream connection from=127.0.0.1:2")
	out := buf.String()
	for _, want := range []string{
		`level=ERROR msg="memberlist: failed to join 127.0.0.1:1: no installed keys could decrypt the message"`,
		`level=WARN msg="memberlist: refuting a suspect message"`,
		"component=memberlist",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "stream connection") {
		t.Errorf("a [DEBUG] line passed an info-level logger:\n%s", out)
	}
}
