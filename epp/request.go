package epp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/admission"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
)

// exchange is the state of one stream: one request and its response.
type exchange struct {
	s                *Server
	srv              grpc.BidiStreamingServer[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]
	reqMode, rspMode BodyMode
	observe          bool // observability mode: the data plane ignores answers

	kind     openai.Kind // 0: not an OpenAI completion path
	headers  bool        // the request headers came
	sub      subset
	body     *bytes.Buffer
	held     int64  // body bytes held in the server's admission bound
	large    bool   // the body was large: the heap is returned after it
	expect   int64  // the request's content-length (0: unknown)
	owned    bool   // body is not from the pool: decoded without a copy
	relaxGC  func() // ends the collector's tightening while a large body is held
	answered bool   // the pick (or a refusal) was sent

	d       *gateway.Decision
	addrs   map[string]string // replica id → address, of the candidates
	flight  *gateway.Flight
	base    string            // the base model of an adapter's request ("" = none)
	prefill []string          // the prefill candidates (none: not disaggregated)
	pre     *gateway.Decision // the prefill pick, nil when none
	pflight *gateway.Flight   // the prefill's load, until the first token
	streams bool              // the response is an event stream
	spot    openai.FirstTokenSpotter
}

// bodies recycles request body buffers.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer put back in the pool.
const maxPooledBody = 1 << 20

// handle serves one message; done = the stream is over for the picker
// (an ImmediateResponse was sent).
func (x *exchange) handle(req *extprocv3.ProcessingRequest) (bool, error) {
	x.observe = req.GetObservabilityMode()
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if x.headers {
			// One stream is one HTTP request: a second pick would leave
			// the first one's load counted for good.
			return true, status.Error(codes.InvalidArgument, "epp: request headers sent twice on one ext_proc stream")
		}
		x.headers = true
		return x.requestHeaders(req, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		if !x.headers {
			return true, status.Error(codes.InvalidArgument, "epp: request body before the request headers")
		}
		return x.requestBody(v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !x.headers {
			return true, status.Error(codes.InvalidArgument, "epp: request trailers before the request headers")
		}
		if !x.answered {
			if done, err := x.pick(false); done || err != nil {
				return done, err
			}
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, x.responseHeaders(req, v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, x.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.finish()
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return false, nil
}

// requestHeaders reads the path and the subset hint, and picks at once
// when there is no body to wait for.
func (x *exchange) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (bool, error) {
	path, _, _ := strings.Cut(header(h.GetHeaders(), ":path"), "?")
	switch path {
	case "/v1/chat/completions":
		x.kind = openai.KindChat
	case "/v1/completions":
		x.kind = openai.KindCompletion
	}
	x.sub = readSubset(req.GetMetadataContext())
	if n, err := strconv.ParseInt(header(h.GetHeaders(), "content-length"), 10, 64); err == nil && n > 0 {
		x.expect = n
	}
	if h.GetEndOfStream() || (x.reqMode != ModeFullDuplexStreamed && x.reqMode != ModeBuffered) {
		x.kind = 0 // no body will come: no key
		return x.pick(false)
	}
	if x.reqMode == ModeBuffered {
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}})
	}
	return false, nil // FULL_DUPLEX_STREAMED: answered after the body
}

// requestBody gathers the body and picks at its end of stream.
func (x *exchange) requestBody(b *extprocv3.HttpBody) (bool, error) {
	if x.answered {
		// Body after the answer (trailers came first, or a data plane
		// sending more): pass it on as it is.
		if x.reqMode == ModeFullDuplexStreamed {
			return false, x.sendAll(bodyChunks(nil, b.GetBody(), b.GetEndOfStream()))
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}})
	}
	if x.body == nil {
		if x.expect > maxPooledBody && x.expect <= int64(x.s.maxBody) {
			// A large body gets a buffer of its size, not the pool's doublings.
			x.body, x.owned = bytes.NewBuffer(make([]byte, 0, x.expect)), true
		} else {
			x.body = bodies.Get().(*bytes.Buffer)
			x.body.Reset()
		}
	}
	if x.relaxGC == nil && int64(x.body.Len())+int64(len(b.GetBody())) >= admission.LargeBody {
		x.relaxGC = x.s.adm.Tighten()
	}
	if x.body.Len()+len(b.GetBody()) > x.s.maxBody {
		x.s.m.Unavailable.WithLabelValues("body_too_large").Inc()
		return true, x.refuse(typev3.StatusCode_PayloadTooLarge, "body_too_large",
			&openai.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body over the endpoint picker's limit of %d bytes", x.s.maxBody)})
	}
	if n := int64(len(b.GetBody())); !x.s.adm.Hold(n) {
		x.s.m.Unavailable.WithLabelValues(causeOverCapacity).Inc()
		return true, x.refuse(typev3.StatusCode_TooManyRequests, causeOverCapacity,
			&openai.Error{Status: http.StatusTooManyRequests, Message: x.s.adm.BusyMessage(max(x.expect, int64(x.body.Len())+n))})
	} else {
		x.held += n
	}
	x.body.Write(b.GetBody())
	// BUFFERED: the whole body comes in one message, without
	// end_of_stream when trailers follow, and waits for its answer.
	if !b.GetEndOfStream() && x.reqMode != ModeBuffered {
		return false, nil
	}
	return x.pick(b.GetEndOfStream())
}

// pick decides and answers: the headers' answer with the destination
// (and, in FULL_DUPLEX_STREAMED mode, the body sent back), or the body's
// answer in BUFFERED mode, or an ImmediateResponse when no endpoint is
// eligible. eos says the body ended (not trailers).
func (x *exchange) pick(eos bool) (bool, error) {
	x.answered = true
	var body []byte
	if x.body != nil {
		body = x.body.Bytes()
	}
	start := time.Now()
	x.large = len(body) >= admission.LargeBody
	keyed, err := x.s.adm.KeyLarge(x.srv.Context(), len(body)) // a large body waits its turn
	if err != nil {
		return true, err
	}
	cands, model, or, refusal := x.candidates(body)
	if refusal != "" {
		keyed()
		x.s.m.Unavailable.WithLabelValues(refusal).Inc()
		x.s.m.Attempts.WithLabelValues(statusFailure, x.s.m.models.label(model), "", "", "").Inc()
		e := &openai.Error{Status: http.StatusServiceUnavailable, Message: "no endpoint of the pool is eligible for this request"}
		code := typev3.StatusCode_ServiceUnavailable
		switch refusal {
		case causeEmptySubset:
			e.Message = "the gateway's endpoint subset (" + SubsetKey + ") names no endpoint of the pool"
		case causeUnknownModel:
			code, e = typev3.StatusCode_NotFound, &openai.Error{Status: http.StatusNotFound, Param: "model", Message: fmt.Sprintf("The model `%s` does not exist.", openai.Clip(model))}
		}
		return true, x.refuse(code, refusal, e)
	}
	d, pre, err := x.decide(or, cands)
	keyed()
	if err != nil {
		return true, err // the stream ended while the prompt was prepared
	}
	x.d, x.pre = d, pre
	x.flight = d.Start(d.Replica)
	rec := d
	if pre != nil {
		x.pflight, rec = pre.Start(pre.Replica), pre
	}
	x.s.record(rec, model, x.addrs[rec.Replica], time.Since(start))

	dest := x.destination()
	mutation := &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{
		SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: DestinationKey, RawValue: []byte(dest)}}}}}
	if pre != nil {
		mutation.HeaderMutation.SetHeaders = append(mutation.HeaderMutation.SetHeaders, x.prefillHeader())
	}
	md := destinationMetadata(dest)
	if x.reqMode == ModeBuffered && x.body != nil {
		err = x.send(&extprocv3.ProcessingResponse{DynamicMetadata: md,
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: mutation}}})
	} else {
		var arr [4]*extprocv3.ProcessingResponse
		out := append(arr[:0], &extprocv3.ProcessingResponse{DynamicMetadata: md,
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: mutation}}})
		if x.body != nil {
			out = bodyChunks(out, body, eos)
		}
		err = x.sendAll(out)
	}
	x.releaseBody()
	if x.large {
		x.s.adm.AfterLarge()
	}
	return false, err
}

// Causes of a request the picker answers itself (unavailable_total).
const (
	causeEmptySubset  = "empty_subset"
	causeNoEligible   = "no_eligible_endpoint"
	causeUnknownModel = "unknown_model" // 404, as the proxy and vLLM answer
	causeOverCapacity = "over_capacity" // 429: the bodies in flight are at their bound
)

// candidates are the replica ids eligible for the request (in the
// subset, serving its model), the request's model, its decoded body
// (nil when it has none or it is not an OpenAI completion: no key), or
// the cause of a refusal: causeUnknownModel when the endpoints declare
// their models and none serves the request's (the proxy's 404), else a
// 503 cause.
func (x *exchange) candidates(body []byte) ([]string, string, *openai.Request, string) {
	var or *openai.Request
	model := ""
	if x.kind != 0 && len(body) > 0 {
		decode := openai.Decode
		if x.owned {
			decode = openai.DecodeOwned
		}
		if r, err := decode(x.kind, body); err == nil {
			or, model = r, r.Model
		}
	}
	if x.sub.set && len(x.sub.addrs) == 0 && len(x.sub.hosts) == 0 {
		return nil, model, nil, causeEmptySubset
	}
	eps := x.s.eps.List()
	cands := make([]string, 0, len(eps))
	x.addrs = make(map[string]string, len(eps))
	for i := range eps {
		e := &eps[i]
		ok, base := e.serves(model)
		if !x.sub.admits(e.Address) || !ok {
			continue
		}
		if base != "" {
			x.base = base
		}
		x.addrs[e.ReplicaID] = e.Address
		if e.Role == RolePrefill {
			x.prefill = append(x.prefill, e.ReplicaID)
			continue
		}
		cands = append(cands, e.ReplicaID)
	}
	if len(cands) == 0 {
		if model != "" && !servesModel(eps, model) {
			return nil, model, nil, causeUnknownModel
		}
		return nil, model, nil, causeNoEligible
	}
	return cands, model, or, ""
}

// servesModel reports whether an endpoint of eps may serve model: one
// declares it, or one declares none (it serves whatever it is sent).
func servesModel(eps []Endpoint, model string) bool {
	for i := range eps {
		if eps[i].Model == "" || eps[i].Model == model {
			return true
		}
	}
	return false
}

// destination is the answer's value: the pick's address, then its
// fallbacks', comma separated.
func (x *exchange) destination() string {
	var b strings.Builder
	b.WriteString(x.addrs[x.d.Replica])
	for _, f := range x.d.Fallbacks {
		b.WriteByte(',')
		b.WriteString(x.addrs[f])
	}
	return b.String()
}

// refuse answers the request itself with status code and e as the
// proxy's OpenAI error body (openai.NewErrorResponse); a 429 carries
// Retry-After.
func (x *exchange) refuse(code typev3.StatusCode, cause string, e *openai.Error) error {
	x.answered = true
	x.releaseBody()
	body, _ := json.Marshal(openai.NewErrorResponse(e))
	hs := []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}
	if code == typev3.StatusCode_TooManyRequests {
		hs = append(hs, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "retry-after", RawValue: []byte(strconv.Itoa(admission.RetryAfterSeconds))}})
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: code}, Body: body, Details: "inference_cache_picker_" + cause,
		Headers: &extprocv3.HeaderMutation{SetHeaders: hs},
	}}})
}

// releaseBody returns the body buffer to the pool and its bytes to the
// admission bound.
func (x *exchange) releaseBody() {
	x.s.adm.Release(x.held)
	x.held = 0
	if x.relaxGC != nil {
		x.relaxGC()
		x.relaxGC = nil
	}
	if x.body != nil {
		if !x.owned && x.body.Cap() <= maxPooledBody {
			bodies.Put(x.body)
		}
		x.body = nil
	}
}

// send sends one answer (none in observability mode).
func (x *exchange) send(r *extprocv3.ProcessingResponse) error {
	if x.observe {
		return nil
	}
	return x.srv.Send(r)
}

func (x *exchange) sendAll(rs []*extprocv3.ProcessingResponse) error {
	for _, r := range rs {
		if err := x.send(r); err != nil {
			return err
		}
	}
	return nil
}

// record counts one pick.
func (s *Server) record(d *gateway.Decision, model, addr string, took time.Duration) {
	port := ""
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		port = addr[i+1:]
	}
	s.m.Attempts.WithLabelValues(statusSuccess, s.m.models.label(model), d.Replica, "", port).Inc()
	s.m.PickLatency.Observe(took.Seconds())
	s.m.Picks.WithLabelValues(d.Reason).Inc()
	if d.FailOpen {
		s.m.FailOpen.Inc()
	}
	if d.LookupRefused != "" {
		s.m.LookupRefused.WithLabelValues(d.LookupRefused).Inc()
		s.refused.Note(s.log, d, time.Now())
	}
	if d.NoKey != nil {
		s.m.NoKey.Inc()
	}
	if d.Lookup > 0 {
		s.m.Lookup.Observe(d.Lookup.Seconds())
	}
}
