package epp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inference-cache/inference-cache/internal/extproctest"
)

// The tests follow the Endpoint Picker Protocol of
// kubernetes-sigs/gateway-api-inference-extension v1.6.0
// (docs/proposals/004-endpoint-picker-protocol) and the answers of its
// reference picker (pkg/lwepp/handlers/server.go, request.go,
// response.go; pkg/common/envoy/chunking.go).

const fullDuplex, buffered = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_BUFFERED

func chatBody(model string, contentBytes int) []byte {
	return fmt.Appendf(nil, `{"model": %q, "stream": true, "messages": [{"role": "user", "content": %q}]}`, model, strings.Repeat("x", contentBytes))
}

func start(t *testing.T, r *rig, req extproctest.Request) *extproctest.Exchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	x, err := extproctest.Start(ctx, r.conn, req)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// In FULL_DUPLEX_STREAMED mode the answer comes after the body's end of
// stream: the warm endpoint, then the fallbacks, in the header and the
// dynamic metadata alike; the route cache cleared; the body sent back
// whole in chunks of at most 62,000 bytes, the last with end_of_stream.
func TestProcess_FullDuplexAnswersAfterTheBodyWithTheWarmEndpointFirst(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	body := chatBody("m", 150_000)
	x := start(t, r, extproctest.Request{Mode: fullDuplex, ResponseMode: fullDuplex, Path: "/v1/chat/completions", Body: body, ChunkSize: 7_000})
	p := x.Pick
	if p.Immediate != nil {
		t.Fatalf("immediate response %v", p.Immediate)
	}
	dest := strings.Split(p.Destination, ",")
	if len(dest) != 3 || dest[0] != "10.0.0.2:8000" || !slices.Contains(dest, "10.0.0.1:8000") || !slices.Contains(dest, "10.0.0.3:8000") {
		t.Fatalf("destination %q, want b's address then a's and c's (d serves another model)", p.Destination)
	}
	if p.Headers[DestinationKey] != p.Destination || !p.ClearRouteCache {
		t.Fatalf("header %q, metadata %q, clear_route_cache %v: want the same value and the cache cleared", p.Headers[DestinationKey], p.Destination, p.ClearRouteCache)
	}
	if string(p.Body) != string(body) || !p.BodyEOS || p.Chunks != 3 { // 150,0xx bytes: 62,000 + 62,000 + the rest
		t.Fatalf("body sent back: %d bytes in %d chunks (eos %v), want %d bytes in 3", len(p.Body), p.Chunks, p.BodyEOS, len(body))
	}
	if got := testutil.ToFloat64(r.m.Picks.WithLabelValues("PREFIX_MATCH")); got != 1 {
		t.Fatalf("picks_total{PREFIX_MATCH} = %v", got)
	}
	if _, err := x.Respond(extproctest.Response{}); err != nil {
		t.Fatal(err)
	}
}

// In BUFFERED mode the headers get an empty CONTINUE, and the pick is in
// the body's answer, which leaves the body as it is.
func TestProcess_BufferedPutsThePickInTheBodyAnswer(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("c", 64)}, Options{})
	x := start(t, r, extproctest.Request{Mode: buffered, ResponseMode: buffered, Path: "/v1/chat/completions", Body: chatBody("m", 100)})
	p := x.Pick
	if !strings.HasPrefix(p.Destination, "10.0.0.3:8000,") || p.Headers[DestinationKey] != p.Destination || !p.ClearRouteCache || p.BodyMutated || p.Chunks != 0 {
		t.Fatalf("pick %+v, want c first, in the body's answer, body untouched", p)
	}
	a, err := x.Respond(extproctest.Response{ContentType: "application/json", Chunks: [][]byte{[]byte(`{"choices":[]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Headers[HeaderReplica] != "c" || a.Headers[HeaderReason] != "PREFIX_MATCH" || a.Headers[HeaderMatchedTokens] != "64" || len(a.Body) != 0 {
		t.Fatalf("response answer %+v, want c's routing headers and no body mutation", a)
	}
}

// A data plane that sends no protocol_config gets the configured mode.
func TestProcess_WithoutProtocolConfigUsesTheConfiguredMode(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("a", 64)}, Options{RequestBodyMode: ModeBuffered, ResponseBodyMode: ModeBuffered})
	x := start(t, r, extproctest.Request{Mode: buffered, ResponseMode: buffered, NoProtocolConfig: true, Path: "/v1/chat/completions", Body: chatBody("m", 10)})
	if !strings.HasPrefix(x.Pick.Destination, "10.0.0.1:8000") {
		t.Fatalf("destination %q, want a first", x.Pick.Destination)
	}
	_ = x.CloseSend()
}

// The subset hint restricts the candidates, in both of its forms; a
// hint for an endpoint outside the subset is not used.
func TestProcess_SubsetHintIsHonoured(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	for _, c := range []struct {
		name   string
		subset []string
		str    bool
		want   []string
	}{
		{"list", []string{"10.0.0.1:8000", "10.0.0.3:8000"}, false, []string{"10.0.0.1:8000", "10.0.0.3:8000"}},
		{"string", []string{"10.0.0.3:8000", "10.0.0.9:8000"}, true, []string{"10.0.0.3:8000"}},
		{"ip without port", []string{"10.0.0.2"}, false, []string{"10.0.0.2:8000"}},
	} {
		for _, mode := range []filterv3.ProcessingMode_BodySendMode{fullDuplex, buffered} {
			x := start(t, r, extproctest.Request{Mode: mode, ResponseMode: mode, Path: "/v1/chat/completions", Body: chatBody("m", 10), Subset: c.subset, SubsetString: c.str})
			got := strings.Split(x.Pick.Destination, ",")
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("%s, %v: destination %q, want exactly %v", c.name, mode, x.Pick.Destination, c.want)
			}
			_ = x.CloseSend()
		}
	}
}

// An empty subset, or one naming no endpoint of the pool, gets an
// ImmediateResponse 503 with an OpenAI-style error body: the request
// goes nowhere.
func TestProcess_503WhenNoEndpointIsEligible(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	for name, c := range map[string]struct {
		subset []string
		cause  string
	}{
		"empty subset":          {[]string{}, causeEmptySubset},
		"subset outside a pool": {[]string{"10.9.9.9:8000"}, causeNoEligible},
	} {
		for _, mode := range []filterv3.ProcessingMode_BodySendMode{fullDuplex, buffered} {
			x := start(t, r, extproctest.Request{Mode: mode, Path: "/v1/chat/completions", Body: chatBody("m", 10), Subset: c.subset})
			im := x.Pick.Immediate
			if im == nil || im.GetStatus().GetCode() != typev3.StatusCode_ServiceUnavailable || x.Pick.Destination != "" {
				t.Fatalf("%s, %v: answer %+v, want an ImmediateResponse 503 and no destination", name, mode, x.Pick)
			}
			if !strings.Contains(string(im.GetBody()), `"error"`) || !strings.Contains(im.GetDetails(), c.cause) {
				t.Fatalf("%s: body %s details %q", name, im.GetBody(), im.GetDetails())
			}
			_ = x.CloseSend()
		}
	}
	if got := testutil.ToFloat64(r.m.Attempts.WithLabelValues(statusFailure, "m", "", "", "")); got != 4 {
		t.Fatalf("scheduler_attempts_total{failure} = %v, want 4", got)
	}
}

// A request without a body (its headers end the stream) is picked at the
// headers, by load, without a lookup.
func TestProcess_NoBodyPicksAtTheHeadersByLoad(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 64)}
	r := newRig(t, lk, Options{})
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Method: "GET", Path: "/v1/models"})
	if len(strings.Split(x.Pick.Destination, ",")) != 4 || lk.calls() != 0 {
		t.Fatalf("destination %q after %d lookups, want all four endpoints and no lookup", x.Pick.Destination, lk.calls())
	}
	if testutil.ToFloat64(r.m.NoKey) != 1 || testutil.ToFloat64(r.m.Picks.WithLabelValues("LOAD")) != 1 {
		t.Fatal("want one no-key pick by LOAD")
	}
	_ = x.CloseSend()
}

// A cluster slower than the lookup budget never delays the pick past it:
// the pick is by load and counted as fail-open.
func TestProcess_FailsOpenWithinTheLookupBudget(t *testing.T) {
	r := newRig(t, &fakeLookup{wait: true}, Options{})
	begin := time.Now()
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 10)})
	took := time.Since(begin)
	if x.Pick.Destination == "" || testutil.ToFloat64(r.m.FailOpen) != 1 {
		t.Fatalf("pick %q, fail-open %v", x.Pick.Destination, testutil.ToFloat64(r.m.FailOpen))
	}
	if took > 20*time.Millisecond+time.Second {
		t.Fatalf("pick took %v with a 20ms budget", took)
	}
	_ = x.CloseSend()
}

// The request's load is counted where it went: on the pick from the
// answer, moved to the endpoint the data plane says served it, kept
// while the stream is read, and ended with the body's end of stream.
func TestProcess_ResponsePhasesFeedTheServedEndpointsFlight(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	x := start(t, r, extproctest.Request{Mode: fullDuplex, ResponseMode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 10)})
	if r.gw.InFlight("b") != 1 {
		t.Fatalf("in flight on b after the pick: %d, want 1", r.gw.InFlight("b"))
	}
	role := []byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	tok := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
	done := []byte("data: [DONE]\n\n")
	var mid []int
	a, err := x.Respond(extproctest.Response{ContentType: "text/event-stream", Served: "10.0.0.3:8000", Chunks: [][]byte{role, tok, done},
		Between: func(int) { mid = append(mid, r.gw.InFlight("b"), r.gw.InFlight("c")) }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mid, []int{0, 1, 0, 1}) {
		t.Fatalf("in flight (b, c) between chunks: %v, want the request on c, not b", mid)
	}
	if r.gw.InFlight("c") != 0 || r.gw.InFlight("b") != 0 {
		t.Fatalf("in flight after the end: b %d c %d", r.gw.InFlight("b"), r.gw.InFlight("c"))
	}
	if string(a.Body) != string(role)+string(tok)+string(done) {
		t.Fatalf("response body sent back %q", a.Body)
	}
	if a.Headers[HeaderReplica] != "c" || a.Headers[HeaderReason] != "LOAD" || testutil.ToFloat64(r.m.ServedElsewhere) != 1 {
		t.Fatalf("routing headers %v, want c (a fallback without a hint: LOAD)", a.Headers)
	}
}

// A stream that ends before its response (the client went away) ends
// the flight too.
func TestProcess_StreamEndEndsTheFlight(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("a", 64)}, Options{})
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 10)})
	if r.gw.InFlight("a") != 1 {
		t.Fatalf("in flight %d", r.gw.InFlight("a"))
	}
	if err := x.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if n := r.gw.InFlight("a"); n != 0 { // the server's Process returned before io.EOF reached the client
		t.Fatalf("in flight after the stream ended: %d", n)
	}
}

// Trailers end the request body: the pick comes before the trailers'
// answer and the body is sent back without end_of_stream; response
// trailers end the flight.
func TestProcess_TrailersEndTheBodyAndTheResponse(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	body := chatBody("m", 10)
	x := start(t, r, extproctest.Request{Mode: fullDuplex, ResponseMode: fullDuplex, Path: "/v1/chat/completions", Body: body, Trailers: true})
	if !strings.HasPrefix(x.Pick.Destination, "10.0.0.2:8000") || string(x.Pick.Body) != string(body) || x.Pick.BodyEOS {
		t.Fatalf("pick %+v", x.Pick)
	}
	if _, err := x.Respond(extproctest.Response{ContentType: "application/json", Chunks: [][]byte{[]byte("{}")}, Trailers: true}); err != nil {
		t.Fatal(err)
	}
	if r.gw.InFlight("b") != 0 {
		t.Fatal("flight not ended by the trailers")
	}
}

// In BUFFERED mode a body followed by trailers comes without
// end_of_stream and waits for its answer: the pick is in that answer.
func TestProcess_BufferedBodyBeforeTrailersIsPicked(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	x := start(t, r, extproctest.Request{Mode: buffered, ResponseMode: buffered, Path: "/v1/chat/completions", Body: chatBody("m", 10), Trailers: true})
	if !strings.HasPrefix(x.Pick.Destination, "10.0.0.2:8000,") || x.Pick.BodyMutated {
		t.Fatalf("pick %+v, want b first in the body's answer", x.Pick)
	}
	_ = x.CloseSend()
}

// A body over the limit gets a 413 and is not held.
func TestProcess_BodyOverTheLimitIs413(t *testing.T) {
	r := newRig(t, &fakeLookup{}, Options{MaxBodyBytes: 1000})
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody("m", 2000), ChunkSize: 500})
	if im := x.Pick.Immediate; im == nil || im.GetStatus().GetCode() != typev3.StatusCode_PayloadTooLarge || !strings.Contains(string(im.GetBody()), "1000 bytes") {
		t.Fatalf("answer %+v, want 413 naming the limit", x.Pick)
	}
	_ = x.CloseSend()
}

// A body that is not an OpenAI request still gets a pick, by load.
func TestProcess_UndecodableBodyPicksByLoad(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 64)}
	r := newRig(t, lk, Options{})
	x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: []byte("not json")})
	if x.Pick.Destination == "" || lk.calls() != 0 || string(x.Pick.Body) != "not json" {
		t.Fatalf("pick %+v after %d lookups", x.Pick, lk.calls())
	}
	_ = x.CloseSend()
}

// With body mode NONE the body never comes: the pick is made at the
// request headers, by load, without a key.
func TestProcess_ModeNonePicksAtTheHeaders(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 64)}
	r := newRig(t, lk, Options{})
	x := start(t, r, extproctest.Request{Mode: filterv3.ProcessingMode_NONE, ResponseMode: filterv3.ProcessingMode_NONE,
		Path: "/v1/chat/completions", Body: chatBody("m", 10)})
	if len(strings.Split(x.Pick.Destination, ",")) != 4 || lk.calls() != 0 || x.Pick.Chunks != 0 {
		t.Fatalf("pick %+v after %d lookups: want all four endpoints, no lookup, no body", x.Pick, lk.calls())
	}
	total := func() int { return r.gw.InFlight("a") + r.gw.InFlight("b") + r.gw.InFlight("c") + r.gw.InFlight("d") }
	if n := total(); n != 1 {
		t.Fatalf("in flight %d after the pick, want 1", n)
	}
	// The response headers end the stream (no body in this mode): done.
	if _, err := x.Respond(extproctest.Response{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	if n := total(); n != 0 {
		t.Fatalf("in flight %d after a response without body, want 0", n)
	}
}

// A client's model names cannot grow the metrics without bound: 100
// requests each naming another model make at most 64 target_model_name
// series plus "other" (each distinct name was a series held for the
// process's life).
func TestProcess_ModelNamesMakeBoundedSeries(t *testing.T) {
	r := newRig(t, &fakeLookup{resp: prefixMatch("b", 64)}, Options{})
	for i := 0; i < 100; i++ {
		x := start(t, r, extproctest.Request{Mode: fullDuplex, Path: "/v1/chat/completions", Body: chatBody(fmt.Sprintf("model-%03d-%s", i, strings.Repeat("x", 300)), 10)})
		if x.Pick.Destination == "" {
			t.Fatalf("request %d not picked: %+v", i, x.Pick)
		}
		_ = x.CloseSend()
	}
	if n := testutil.CollectAndCount(r.m.Attempts); n > maxModelLabels+1 {
		t.Fatalf("%d scheduler_attempts_total series after 100 models, want at most %d", n, maxModelLabels+1)
	}
	var others float64
	for _, id := range []string{"a", "b", "c", "d"} {
		others += testutil.ToFloat64(r.m.Attempts.WithLabelValues(statusSuccess, otherModels, id, "", "8000"))
	}
	if others != 100-maxModelLabels {
		t.Errorf("%v picks counted under %q, want %d", others, otherModels, 100-maxModelLabels)
	}
}
