package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inference-cache/inference-cache/internal/extproctest"
	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// Every bad flag is refused before anything starts, naming the flag.
func TestPickerCmd_BadFlagsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("endpoints:\n  - address: 10.0.0.1:8000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"picker", "--listen", "127.0.0.1:0", "--health-listen", "", "--metrics-listen", ""}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	ep := []string{"--endpoint", "10.0.0.1:8000=a"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{with(), "--endpoint, --endpoints or --pool-name: give the endpoints"},
		{with("--endpoint", "10.0.0.1:8000"), `--endpoint "10.0.0.1:8000": want ADDRESS=REPLICA_ID`},
		{with("--endpoint", "10.0.0.1=a"), `want IP:PORT`},
		{with("--endpoint", "10.0.0.1:8000=a", "--endpoint", "10.0.0.1:8000=b"), `address "10.0.0.1:8000" is also endpoints[0]'s`},
		{with("--endpoints", bad), "--endpoints: " + bad + ": endpoints[0]: address \"10.0.0.1:8000\": replica_id: required"},
		{with(append(ep, "--pool-name", "p")...), "--pool-name: not with --endpoint"},
		{with(append(ep, "--strategy", "random")...), `--strategy: strategy "random"`},
		{with(append(ep, "--lookup-budget", "0s")...), "--lookup-budget 0s: must be positive"},
		{with(append(ep, "--block-size", "0")...), "--block-size 0: want 1 to 4096"},
		{with(append(ep, "--max-body-bytes", "0")...), "--max-body-bytes 0: must be positive"},
		{with(append(ep, "--request-body-mode", "STREAMED")...), `--request-body-mode: body mode "STREAMED": want FULL_DUPLEX_STREAMED or BUFFERED`},
		{with(append(ep, "--addr", "127.0.0.1")...), `--addr "127.0.0.1": want HOST:PORT`},
		{with(append(ep, "--listen", "9002")...), `--listen "9002": want HOST:PORT`},
	} {
		_, err := runCLI(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v:\n got  %v\n want an error containing %q", c.args[len(base):], err, c.want)
		}
	}
}

// The command serves ext_proc, health by name on both gRPC ports, and
// the reference-named metrics.
func TestPickerCmd_ServesExtProcHealthAndMetrics(t *testing.T) {
	ext, hp, mp := freeport.MustAddr(t), freeport.MustAddr(t), freeport.MustAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// The drain is not under test here (the default would hold the
		// cleanup for 15 s).
		_, err := runCLIContext(ctx, "picker", "--listen", ext, "--health-listen", hp, "--metrics-listen", mp,
			"--endpoint", "10.0.0.1:8000=a", "--endpoint", "10.0.0.2:8000=b", "--drain-time", "50ms")
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for _, addr := range []string{ext, hp} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hc := healthpb.NewHealthClient(conn)
		poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
			if err != nil {
				return false, err.Error()
			}
			return r.GetStatus() == healthpb.HealthCheckResponse_SERVING, r.GetStatus().String()
		})
		for _, svc := range []string{"liveness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
			if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%s %q: %v %v", addr, svc, r, err)
			}
		}
		if addr != ext {
			continue
		}
		x, err := extproctest.Start(ctx, conn, extproctest.Request{Mode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, Path: "/v1/chat/completions",
			Body: []byte(`{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`)})
		if err != nil {
			t.Fatal(err)
		}
		if d := x.Pick.Destination; d != "10.0.0.1:8000,10.0.0.2:8000" && d != "10.0.0.2:8000,10.0.0.1:8000" {
			t.Fatalf("destination %q, want both endpoints", d)
		}
		_ = x.CloseSend()
	}
	resp, err := http.Get("http://" + mp + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`inference_pool_ready_pods{name="static"} 2`, `inference_extension_scheduler_attempts_total{namespace="",pod_name=`,
		`inference_cache_picker_picks_total{reason="LOAD"} 1`, "inference_extension_scheduler_e2e_duration_seconds_count 1"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// runCLIContext runs the command line until ctx ends.
func runCLIContext(ctx context.Context, args ...string) (string, error) {
	cmd := newRootCmd()
	var out strings.Builder
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}
