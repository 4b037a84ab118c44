package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/metrics"
)

// panickyHealth panics in its unary and its streaming method, except
// for a Check of service "calm".
type panickyHealth struct {
	healthpb.UnimplementedHealthServer
}

func (panickyHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "calm" {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	panic("tenant-b secret in a panic value")
}

func (panickyHealth) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	panic("stream handler fault")
}

// A panic in any handler of a server built with the production options
// is answered INTERNAL with PanicMessage (never the panic value), counted
// by method, and the process keeps serving: the next call succeeds.
func TestServerOptions_PanicsAnsweredInternal(t *testing.T) {
	m := metrics.New()
	gs := grpc.NewServer(serverOptions(ServerConfig{Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})...)
	healthpb.RegisterHealthServer(gs, panickyHealth{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != PanicMessage || strings.Contains(st.Message(), "secret") {
		t.Fatalf("unary panic answered %v %q; want INTERNAL %q", st.Code(), st.Message(), PanicMessage)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Recv()
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != PanicMessage {
		t.Fatalf("stream panic answered %v %q; want INTERNAL %q", st.Code(), st.Message(), PanicMessage)
	}
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "calm"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after the panics: %v, %v; want SERVING", r, err)
	}
	const metric = `
# HELP inferencecache_rpc_panics_total Panics recovered in gRPC handlers and answered INTERNAL (contract §9.6), by full method name.
# TYPE inferencecache_rpc_panics_total counter
inferencecache_rpc_panics_total{method="/grpc.health.v1.Health/Check"} 1
inferencecache_rpc_panics_total{method="/grpc.health.v1.Health/Watch"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(metric), "inferencecache_rpc_panics_total"); err != nil {
		t.Fatal(err)
	}
}
