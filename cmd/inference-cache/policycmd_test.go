package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/policy"
)

// policyServer keeps one policy and bumps its version on each set, as
// the cluster does.
type policyServer struct {
	pb.UnimplementedInferenceCacheServer
	mu  sync.Mutex
	cur *pb.CachePolicy
}

func (s *policyServer) GetCachePolicy(context.Context, *pb.GetCachePolicyRequest) (*pb.CachePolicy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.cur).(*pb.CachePolicy), nil
}

func (s *policyServer) SetCachePolicy(_ context.Context, req *pb.SetCachePolicyRequest) (*pb.CachePolicy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.cur.Version
	s.cur = proto.Clone(req.Policy).(*pb.CachePolicy)
	s.cur.Version = v + 1
	return proto.Clone(s.cur).(*pb.CachePolicy), nil
}

// startGRPC serves the InferenceCache service srv on a loopback port and
// returns its address.
func startGRPC(t *testing.T, srv pb.InferenceCacheServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterInferenceCacheServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// A policy set that commits says which version it committed and which it
// replaced (on stderr), and stdout stays the YAML of the policy in force.
func TestPolicySet_SaysTheVersionItCommitted(t *testing.T) {
	p := policy.Default()
	start := api.PolicyToPB(p)
	start.Version = 7
	addr := startGRPC(t, &policyServer{cur: start})
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("kind: CachePolicy\nspec:\n  maxReplicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := newRootCmd()
	var out, errOut strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"policy", "set", file, "--addr", addr})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "committed " + file + " as policy version 8 (was version 7); the policy now in force:\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
	if !strings.HasPrefix(out.String(), "# version 8\nkind: CachePolicy\n") || !strings.Contains(out.String(), "maxReplicas: 3\n") {
		t.Errorf("stdout is not the committed policy's YAML:\n%s", out.String())
	}
}
