package raftnode_test

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/inference-cache/inference-cache/api"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/tlsconfig"
	"github.com/inference-cache/inference-cache/tlsconfig/tlstest"
)

// secureCluster is a 3-node cluster with Raft over mutual TLS, encrypted
// gossip, and forwarding over mutual TLS behind the admin (peer) token.
// forward overrides the files and token a node dials its leader with.
func secureCluster(t *testing.T, forward tlsconfig.Files, token string) *clustertest.Cluster {
	t.Helper()
	s, err := tlstest.WriteSet(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	node, err := tlsconfig.NewReloader(tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey, CAFile: s.CA}, tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := node.ServerConfig(tlsconfig.ClientAuthRequireAndVerify)
	if err != nil {
		t.Fatal(err)
	}
	if forward.CAFile == "" {
		forward = tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey, CAFile: s.CA}
	} else {
		// Test-relative names: "other" and "expired" pick those files.
		switch forward.CertFile {
		case "other":
			forward = tlsconfig.Files{CertFile: s.OtherCert, KeyFile: s.OtherKey, CAFile: s.CA}
		case "expired":
			forward = tlsconfig.Files{CertFile: s.ExpiredCert, KeyFile: s.ExpiredKey, CAFile: s.CA}
		}
	}
	fwd, err := tlsconfig.NewReloader(forward, tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	auth := api.NewAuth(api.AuthConfig{Admin: tlsconfig.StaticSecrets("admin-token"), Write: tlsconfig.StaticSecrets("write-token")})
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.WriteRetry = 1500 * time.Millisecond
		cfg.RaftTLS = &raftnode.RaftTLS{Server: srv, Client: node.ClientConfig("")}
		cfg.GossipKeys = [][]byte{key}
		cfg.DialOptions = []grpc.DialOption{
			grpc.WithTransportCredentials(credentials.NewTLS(fwd.ClientConfig(""))),
			grpc.WithPerRPCCredentials(client.BearerToken(token)),
		}
	})
	c.ServerOptions = func(int) []grpc.ServerOption {
		return append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(srv))}, auth.ServerOptions()...)
	}
	return c
}

func TestSecureCluster_RaftTLSGossipKeysAndForwardingOverMutualTLS(t *testing.T) {
	c := secureCluster(t, tlsconfig.Files{}, "admin-token")
	c.StartAll()
	l := c.WaitLeader(20 * time.Second)
	f := follower(c, l)
	now := time.Now().UnixMilli()
	idx, err := appliedAt(c.Nodes[f].Ingest(c.Ctx(5*time.Second), "tls-1", evs("replica-a", 100, 8, now)))
	if err != nil {
		t.Fatalf("write forwarded over mTLS: %v", err)
	}
	assertSameDigest(t, c, idx)
	for _, i := range c.Running() {
		if res := lookup(c.Nodes[i], 100, 8, now); res.Reason != index.PrefixMatch {
			t.Fatalf("%s: %+v", c.Nodes[i].ID, res)
		}
	}
}

func TestSecureCluster_ForwardingRefusesBadCertificatesAndTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	for _, c := range []struct {
		name  string
		files tlsconfig.Files
		token string
	}{
		{"client cert of another CA", tlsconfig.Files{CertFile: "other", CAFile: "x"}, "admin-token"},
		{"expired client cert", tlsconfig.Files{CertFile: "expired", CAFile: "x"}, "admin-token"},
		{"write token is not a peer token", tlsconfig.Files{}, "write-token"},
		{"no token", tlsconfig.Files{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := secureCluster(t, c.files, c.token)
			cl.StartAll()
			now := time.Now().UnixMilli()
			var err error
			for attempt := 0; ; attempt++ {
				l := cl.WaitLeader(20 * time.Second)
				f := follower(cl, l)
				_, err = cl.Nodes[f].Ingest(cl.Ctx(5*time.Second), "", evs("replica-a", 100, 8, now))
				if err != nil {
					break
				}
				// On a loaded machine leadership can move to f between
				// WaitLeader and the write, which f then commits itself
				// with no forwarding at all: only that excuses a success.
				if st := cl.Nodes[f].Status(); st.State != "Leader" || attempt == 3 {
					t.Fatalf("a follower forwarded a write with refused credentials (state %s)", st.State)
				}
			}
			if !errors.Is(err, raftnode.ErrForward) && !errors.Is(err, raftnode.ErrTimeout) {
				t.Fatalf("error %v: want ErrForward or ErrTimeout", err)
			}
			// The leader itself still takes writes: Raft (mTLS) is fine.
			l := cl.WaitLeader(10 * time.Second)
			if _, err := cl.Nodes[l].Ingest(cl.Ctx(5*time.Second), "", evs("replica-a", 100, 8, now)); err != nil {
				t.Fatalf("leader write: %v", err)
			}
		})
	}
}
