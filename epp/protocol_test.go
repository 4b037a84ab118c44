package epp

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/internal/extproctest"
)

// Messages out of the protocol's order (one stream is one HTTP request,
// whose headers come first: docs/proposals/004-endpoint-picker-protocol,
// and Envoy's ext_proc filter sends them so) end the stream with
// INVALID_ARGUMENT, and leave no request counted in flight.

func headersMsg(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":path", RawValue: []byte("/v1/completions")}, {Key: ":method", RawValue: []byte("POST")}}},
		EndOfStream: eos}}}
}

// rawExchange sends msgs on one stream, closes its send side and returns
// the answers and the stream's final status.
func rawExchange(t *testing.T, r *rig, msgs ...*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(r.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the server ended the stream: its status comes from Recv
		}
	}
	_ = st.CloseSend()
	var out []*extprocv3.ProcessingResponse
	for {
		resp, err := st.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, resp)
	}
}

func TestProcess_SecondRequestHeadersEndTheStreamWithoutLeakingLoad(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("a", 64)}, Options{})
	out, err := rawExchange(t, r, headersMsg(true), headersMsg(true))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "request headers sent twice") {
		t.Fatalf("status %v, want INVALID_ARGUMENT naming the repeated headers", err)
	}
	if len(out) != 1 || out[0].GetRequestHeaders() == nil {
		t.Fatalf("answers %v, want the first headers' pick only", out)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if n := r.gw.InFlight(id); n != 0 {
			t.Errorf("replica %s: %d in flight after the stream ended, want 0", id, n)
		}
	}
}

func TestProcess_BodyOrTrailersBeforeHeadersAreRefused(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("a", 64)}, Options{})
	for name, msg := range map[string]*extprocv3.ProcessingRequest{
		"body": {Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: []byte(`{"model":"m","prompt":"x"}`), EndOfStream: true}}},
		"trailers": {Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
	} {
		out, err := rawExchange(t, r, msg)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "before the request headers") || len(out) != 0 {
			t.Errorf("%s first: answers %v, status %v; want none and INVALID_ARGUMENT", name, out, err)
		}
	}
	if r.gw.InFlight("a") != 0 {
		t.Error("a refused stream left a request in flight")
	}
}

// A BUFFERED body arrives as one message: one over gRPC's default 4 MiB
// receive limit but within the picker's body limit is picked, not
// refused by the transport.
func TestProcess_BufferedBodyOverFourMiBIsPicked(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	x := start(t, r, extproctest.Request{Mode: buffered, Path: "/v1/chat/completions", Body: chatBody("m", 5<<20)})
	if !strings.HasPrefix(x.Pick.Destination, "10.0.0.2:8000,") {
		t.Fatalf("pick %+v, want b first", x.Pick)
	}
	_ = x.CloseSend()
}
