package epp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/internal/extproctest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// A model no endpoint serves (every endpoint declares its model) gets the
// proxy's answer: a 404 NotFoundError naming the model, clipped.
func TestProcess_UnknownModelIs404LikeTheProxy(t *testing.T) {
	r := newRig(t, &fakeLookup{}, Options{})
	if err := r.t.Set([]Endpoint{{Address: "10.0.0.1:8000", ReplicaID: "a", Model: "qwen3"}}); err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("m", 1<<20)
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody(name, 10)})
	defer x.CloseSend()
	im := x.Pick.Immediate
	if im == nil || im.GetStatus().GetCode() != typev3.StatusCode_NotFound {
		t.Fatalf("answer %+v, want an ImmediateResponse 404", x.Pick)
	}
	var e openai.ErrorResponse
	if err := json.Unmarshal(im.GetBody(), &e); err != nil || e.Error.Type != "NotFoundError" || e.Error.Param == nil || *e.Error.Param != "model" {
		t.Fatalf("body %.200s: want the proxy's NotFoundError on param model", im.GetBody())
	}
	if len(im.GetBody()) > 1024 {
		t.Errorf("the 404 echoes %d bytes of a 1 MiB model name, want it clipped", len(im.GetBody()))
	}
}

// Bodies gathered at once are bounded: one that does not fit gets a 429
// with Retry-After, and its bytes are given back (the next one fits).
func TestProcess_BodiesInFlightOverTheBoundGet429(t *testing.T) {
	r := newRig(t, &fakeLookup{}, Options{MaxBodyBytes: 4096, MaxBodyBytesInFlight: 4096})
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 5000)})
	_ = x.CloseSend()
	im := x.Pick.Immediate
	if im == nil || im.GetStatus().GetCode() != typev3.StatusCode_PayloadTooLarge {
		t.Fatalf("a body over the body limit: %+v, want 413", x.Pick)
	}
	// Hold the whole bound with an unfinished body, then send a second.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// openHold starts a holder; refused is closed when the picker answers
	// it at once (a 429: the first exchange's bytes, given back when its
	// stream ends, were still held), and then another is opened.
	openHold := func() (hold extprocv3.ExternalProcessor_ProcessClient, refused chan struct{}) {
		hold, err := extprocv3.NewExternalProcessorClient(r.conn).Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = hold.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/chat/completions")}, {Key: ":method", RawValue: []byte("POST")}}}}}})
		_ = hold.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: make([]byte, 4000)}}})
		refused = make(chan struct{})
		go func() {
			for {
				resp, err := hold.Recv()
				if err != nil {
					return
				}
				if resp.GetImmediateResponse() != nil {
					close(refused)
					return
				}
			}
		}()
		return hold, refused
	}
	hold, refused := openHold()
	var second *extproctest.Exchange
	// The held body reaches the bound asynchronously: ask until a request
	// is refused, within a deadline.
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		select {
		case <-refused:
			_ = hold.CloseSend()
			hold, refused = openHold()
			return false, "the holder was refused: the first exchange's bytes were not given back yet"
		default:
		}
		second = start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 200)})
		_ = second.CloseSend()
		im := second.Pick.Immediate
		return im != nil && im.GetStatus().GetCode() == typev3.StatusCode_TooManyRequests, fmt.Sprintf("answered %+v while a body is held past the bound, want 429", second.Pick)
	})
	im = second.Pick.Immediate
	if im == nil || im.GetStatus().GetCode() != typev3.StatusCode_TooManyRequests || !strings.Contains(im.String(), "retry-after") {
		t.Fatalf("a body past the bytes in flight: %+v, want 429 with retry-after", second.Pick)
	}
	_ = hold.CloseSend()
	cancel()
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		third := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 200)})
		_ = third.CloseSend()
		// A pick once the held bytes came back.
		return third.Pick.Immediate == nil, fmt.Sprintf("after the holder left: %+v, want a pick", third.Pick)
	})
}

// A stream on which nothing arrives for the idle timeout is ended with
// DEADLINE_EXCEEDED.
func TestProcess_IdleStreamIsEnded(t *testing.T) {
	r := newRig(t, &fakeLookup{}, Options{StreamIdleTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(r.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv() // nothing sent: the picker ends the stream
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("idle stream: %v, want DEADLINE_EXCEEDED", err)
	}
}

// Drain turns readiness NOT_SERVING at once; liveness stays SERVING.
func TestHealth_DrainFailsReadinessOnly(t *testing.T) {
	tbl := &Table{}
	if err := tbl.Set(pool); err != nil {
		t.Fatal(err)
	}
	h := NewHealth(tbl)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, _ := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		return r.GetStatus()
	}
	if check(HealthReadiness) != healthpb.HealthCheckResponse_SERVING {
		t.Fatal("not ready before the drain")
	}
	h.Drain()
	if check(HealthReadiness) != healthpb.HealthCheckResponse_NOT_SERVING || check(HealthExtProc) != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Error("readiness still SERVING after Drain")
	}
	if check(HealthLiveness) != healthpb.HealthCheckResponse_SERVING {
		t.Error("liveness failed after Drain: Kubernetes would restart a draining picker")
	}
}
