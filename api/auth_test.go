package api

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
	"github.com/inference-cache/inference-cache/tlsconfig"
)

// authServer serves every service the real server registers (handlers
// that pass authentication answer anything but UNAUTHENTICATED /
// PERMISSION_DENIED) behind auth.
func authServer(t *testing.T, auth *Auth) *grpc.ClientConn {
	t.Helper()
	return grpcServer(t, auth.ServerOptions(), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, newSvc(&fakeNode{lookup: match}, nil))
		pb.RegisterClusterServer(gs, pb.UnimplementedClusterServer{})
		forwardpb.RegisterForwardServer(gs, forwardpb.UnimplementedForwardServer{})
		healthpb.RegisterHealthServer(gs, health.NewServer())
		reflection.Register(gs)
	})
}

// call invokes method (unary or stream) with an empty request and
// returns the status code.
func call(ctx context.Context, cc *grpc.ClientConn, method string, sd *grpc.StreamDesc) codes.Code {
	if sd == nil {
		return status.Code(cc.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}))
	}
	st, err := cc.NewStream(ctx, sd, method)
	if err != nil {
		return status.Code(err)
	}
	_ = st.SendMsg(&emptypb.Empty{})
	_ = st.CloseSend()
	// The first message or the final status is enough: a watch stream
	// never ends by itself.
	return status.Code(st.RecvMsg(&emptypb.Empty{}))
}

type rpc struct {
	method string
	sd     *grpc.StreamDesc
}

// everyRPC lists every method of every service the server registers, from
// the service descriptors, so a new RPC is covered without editing this.
func everyRPC() []rpc {
	var out []rpc
	for _, d := range []grpc.ServiceDesc{pb.InferenceCache_ServiceDesc, pb.Cluster_ServiceDesc, forwardpb.Forward_ServiceDesc, healthpb.Health_ServiceDesc} {
		for _, m := range d.Methods {
			out = append(out, rpc{"/" + d.ServiceName + "/" + m.MethodName, nil})
		}
		for i := range d.Streams {
			s := d.Streams[i]
			out = append(out, rpc{"/" + d.ServiceName + "/" + s.StreamName, &s})
		}
	}
	out = append(out, rpc{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}})
	return out
}

func TestMethodClass_EveryRegisteredRPCHasTheDocumentedClass(t *testing.T) {
	want := map[string]Class{
		"LookupRoute": ClassLookup, "GetCachePolicy": ClassLookup, "ReportPickerLoad": ClassLookup, "SharePicks": ClassLookup,
		"Ingest": ClassWrite, "IngestStream": ClassWrite, "ReportReplicaStats": ClassWrite, "SetCachePolicy": ClassWrite,
		"Status": ClassAdmin, "AddServer": ClassAdmin, "RemoveServer": ClassAdmin, "TransferLeadership": ClassAdmin,
		"Snapshot": ClassAdmin, "Digest": ClassAdmin, "Backup": ClassAdmin, "Restore": ClassAdmin,
		"Check": ClassOpen, "Watch": ClassOpen, "List": ClassOpen, "ServerReflectionInfo": ClassOpen,
	}
	for _, r := range everyRPC() {
		name := r.method[len(r.method)-len(lastSeg(r.method)):]
		w, ok := want[name]
		if r.method == forwardpb.Forward_Apply_FullMethodName || r.method == forwardpb.Forward_Restore_FullMethodName ||
			r.method == forwardpb.Forward_ShareLoad_FullMethodName {
			w, ok = ClassPeer, true
		}
		if !ok {
			t.Errorf("%s: not in the table of this test; add it with its class", r.method)
			continue
		}
		if got := MethodClass(r.method); got != w {
			t.Errorf("%s: class %s, want %s", r.method, got, w)
		}
	}
	if MethodClass("/some.New/Method") != ClassAdmin {
		t.Error("an unknown method must need the admin token")
	}
}

func lastSeg(m string) string {
	for i := len(m) - 1; i >= 0; i-- {
		if m[i] == '/' {
			return m[i+1:]
		}
	}
	return m
}

func TestAuth_TokenRefusalsPerRPC(t *testing.T) {
	const write, admin, lookup, wrong = "w-token", "a-token", "l-token", "nope"
	refused := func(c codes.Code) bool { return c == codes.Unauthenticated || c == codes.PermissionDenied }
	configs := []struct {
		name string
		cfg  AuthConfig
		// allowed: which presented tokens ("" = none, "*" = any) may
		// call a class.
		allowed map[Class][]string
	}{
		{"write+admin, lookup open", AuthConfig{Write: tlsconfig.StaticSecrets(write), Admin: tlsconfig.StaticSecrets(admin)}, map[Class][]string{
			ClassOpen: {"*"}, ClassLookup: {"*"},
			ClassWrite: {write, admin}, ClassAdmin: {admin}, ClassPeer: {admin},
		}},
		{"all three tokens", AuthConfig{Write: tlsconfig.StaticSecrets(write), Admin: tlsconfig.StaticSecrets(admin), Lookup: tlsconfig.StaticSecrets(lookup)}, map[Class][]string{
			ClassOpen: {"*"}, ClassLookup: {lookup, write, admin},
			ClassWrite: {write, admin}, ClassAdmin: {admin}, ClassPeer: {admin},
		}},
		{"write token only", AuthConfig{Write: tlsconfig.StaticSecrets(write)}, map[Class][]string{
			ClassOpen: {"*"}, ClassLookup: {"*"},
			ClassWrite: {write}, ClassAdmin: {"*"}, ClassPeer: {write},
		}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			cc := authServer(t, NewAuth(c.cfg))
			for _, r := range everyRPC() {
				cls := MethodClass(r.method)
				ok := map[string]bool{}
				for _, tk := range c.allowed[cls] {
					ok[tk] = true
				}
				for _, tk := range []string{"", write, admin, lookup, wrong} {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if tk != "" {
						ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tk)
					}
					code := call(ctx, cc, r.method, r.sd)
					cancel()
					if ok["*"] {
						ok[tk] = true
					}
					if ok[tk] && refused(code) {
						t.Errorf("%s (%s) with token %q: refused (%s), want allowed", r.method, cls, tk, code)
					}
					if !ok[tk] && !refused(code) {
						t.Errorf("%s (%s) with token %q: %s, want refused", r.method, cls, tk, code)
					}
				}
			}
		})
	}
}

func TestAuth_NoTokensConfiguredIsOpenAndErrorsNeverEchoTokens(t *testing.T) {
	a := NewAuth(AuthConfig{})
	if a.Enabled() || a.PeerToken() != "" {
		t.Fatal("no tokens: auth must be off")
	}
	a = NewAuth(AuthConfig{Write: tlsconfig.StaticSecrets("old-secret", "new-secret"), Admin: tlsconfig.StaticSecrets("adm")})
	if a.PeerToken() != "adm" {
		t.Fatalf("peer token %q, want the admin token", a.PeerToken())
	}
	for _, tk := range []string{"old-secret", "new-secret"} { // rotation: both accepted
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "bearer "+tk))
		if err := a.Check(ctx, ClassWrite); err != nil {
			t.Errorf("token %q: %v", tk, err)
		}
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer guess-secret"))
	err := a.Check(ctx, ClassWrite)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	for _, s := range []string{"guess", "old-secret", "new-secret", "adm"} {
		if contains(err.Error(), s) {
			t.Fatalf("error %q echoes a token", err)
		}
	}
	ctx = metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Basic adm"))
	if status.Code(a.Check(ctx, ClassAdmin)) != codes.Unauthenticated {
		t.Fatal("a non-bearer scheme must not authenticate")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
