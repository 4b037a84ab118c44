package epp

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// responseHeaders moves the request's load to the endpoint that served
// it (the data plane's x-gateway-destination-endpoint-served, when it
// names another endpoint of the pool than the pick), marks the first
// token of a response that is not an event stream (its headers arrive
// with its whole answer), and answers with the routing headers.
func (x *exchange) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	resp := &extprocv3.HeadersResponse{}
	if x.d != nil && x.flight != nil {
		if served := servedEndpoint(req.GetMetadataContext()); served != "" {
			if e := x.s.eps.byAddress(served); e != nil && e.ReplicaID != x.flight.Replica() {
				x.flight.Fail() // the pick never got it: its provisional residency goes
				x.flight = x.d.Start(e.ReplicaID)
				x.s.m.ServedElsewhere.Inc()
			}
		}
		x.streams = strings.HasPrefix(header(h.GetHeaders(), "content-type"), "text/event-stream")
		if !x.streams {
			x.flight.FirstToken()
		}
		reason, matched := x.d.ReasonFor(x.flight.Replica())
		resp.Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: HeaderReplica, RawValue: []byte(x.flight.Replica())}},
			{Header: &corev3.HeaderValue{Key: HeaderReason, RawValue: []byte(reason)}},
			{Header: &corev3.HeaderValue{Key: HeaderMatchedTokens, RawValue: []byte(strconv.Itoa(matched))}},
		}}}
		if h.GetEndOfStream() {
			x.finish()
		}
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: resp}})
}

// responseBody spots the first token of an event stream and ends the
// flight at the body's end; in FULL_DUPLEX_STREAMED mode each chunk is
// sent back as it came.
func (x *exchange) responseBody(b *extprocv3.HttpBody) error {
	if x.flight != nil && x.streams && x.spot.Feed(b.GetBody()) {
		x.flight.FirstToken()
	}
	if b.GetEndOfStream() {
		x.finish()
	}
	resp := &extprocv3.BodyResponse{}
	if x.rspMode == ModeFullDuplexStreamed {
		resp.Response = &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}}}}
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: resp}})
}

// finish records the request's end on the endpoint that served it.
func (x *exchange) finish() {
	if x.flight != nil {
		x.flight.Done()
	}
}

// end releases the stream's state: a request whose stream ended before
// its response did (the client went away, the data plane closed the
// stream) failed, and its provisional residency is dropped (contract
// §5.12); a finished one is left as it was.
func (x *exchange) end() {
	if x.flight != nil {
		x.flight.Fail()
	}
	x.releaseBody()
}
