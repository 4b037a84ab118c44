// Package extproctest drives an Envoy external processor
// (envoy.service.ext_proc.v3) over one stream per request as Envoy's
// ext_proc filter does, for tests and benchmarks of the endpoint picker.
// It follows Envoy's filter (source/extensions/filters/http/ext_proc,
// the ProcessingMode semantics of
// api/envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto)
// and the Endpoint Picker Protocol of kubernetes-sigs/
// gateway-api-inference-extension v1.6.0
// (docs/proposals/004-endpoint-picker-protocol):
//
//   - the first message carries protocol_config (the body modes);
//   - FULL_DUPLEX_STREAMED: request headers, then every body chunk, then
//     the trailers, sent without waiting; the processor's answers (the
//     headers' answer, the body sent back in streamed_response chunks,
//     the trailers' answer) are read after;
//   - BUFFERED: the headers are sent and answered, then the whole body in
//     one message (end_of_stream) and answered;
//   - the subset hint is filter metadata envoy.lb.subset_hint /
//     x-gateway-destination-endpoint-subset on the request headers
//     message; the served endpoint is envoy.lb /
//     x-gateway-destination-endpoint-served on the response headers
//     message;
//   - the response: its headers (:status, content-type), its body chunks
//     (end_of_stream on the last), its trailers, in the same modes.
package extproctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Request is one HTTP request as the data plane sees it.
type Request struct {
	// Mode and ResponseMode are the body modes (FULL_DUPLEX_STREAMED or
	// BUFFERED; NONE sends no body).
	Mode, ResponseMode filterv3.ProcessingMode_BodySendMode
	// NoProtocolConfig leaves protocol_config out (an older data plane).
	NoProtocolConfig bool
	// Method and Path are :method (default POST) and :path.
	Method, Path string
	// Headers are the other request headers.
	Headers map[string]string
	// Body is the request body, sent in chunks of ChunkSize bytes (0 =
	// one chunk) in FULL_DUPLEX_STREAMED mode.
	Body      []byte
	ChunkSize int
	// Subset, when not nil, is the subset hint: a list of strings, or
	// with SubsetString the comma-joined single string form.
	Subset       []string
	SubsetString bool
	// Trailers sends request trailers after the body (the body's last
	// chunk then has no end_of_stream).
	Trailers bool
}

// Pick is the processor's answer to the request phase.
type Pick struct {
	// Immediate is set when the processor answered the request itself.
	Immediate *extprocv3.ImmediateResponse
	// Headers are the header mutation's set headers (key → value).
	Headers map[string]string
	// Destination is the dynamic metadata envoy.lb /
	// x-gateway-destination-endpoint ("" when absent).
	Destination string
	// ClearRouteCache is the answer's clear_route_cache.
	ClearRouteCache bool
	// Body is the request body the processor sent back
	// (FULL_DUPLEX_STREAMED), BodyEOS whether its last chunk had
	// end_of_stream, and Chunks how many it came in.
	Body    []byte
	BodyEOS bool
	Chunks  int
	// BodyMutated reports a body mutation in a BUFFERED answer.
	BodyMutated bool
}

// Response is the upstream's answer as the data plane sees it.
type Response struct {
	// Status is :status (default 200); ContentType the content-type.
	Status      int
	ContentType string
	// Served is the endpoint that served the request (metadata
	// x-gateway-destination-endpoint-served); "" = not sent.
	Served string
	// Chunks are the response body's pieces, in order.
	Chunks [][]byte
	// Trailers sends response trailers after the body.
	Trailers bool
	// Between, when set, is called after each body chunk is sent and
	// before the next (FULL_DUPLEX_STREAMED): a test observes the
	// processor's state mid-stream there.
	Between func(i int)
}

// Answered is the processor's answer to the response phase.
type Answered struct {
	// Headers are the response header mutation's set headers.
	Headers map[string]string
	// Body is the response body sent back (FULL_DUPLEX_STREAMED).
	Body []byte
}

// Exchange is one stream: one request, then its response.
type Exchange struct {
	st  grpc.BidiStreamingClient[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]
	req Request
	// answered: the headers (or, BUFFERED, the body) were answered.
	answered bool
	// Pick is the request phase's answer.
	Pick Pick
}

// Start opens a stream on conn, sends the request phase as Envoy does
// and reads the processor's answer into Exchange.Pick.
func Start(ctx context.Context, conn grpc.ClientConnInterface, r Request) (*Exchange, error) {
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return nil, err
	}
	x := &Exchange{st: st, req: r}
	if err := x.request(); err != nil {
		_ = st.CloseSend()
		return nil, err
	}
	return x, nil
}

func headerMap(kv map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range kv {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

func (x *Exchange) request() error {
	r := x.req
	method := r.Method
	if method == "" {
		method = "POST"
	}
	h := map[string]string{":method": method, ":path": r.Path, ":scheme": "http", ":authority": "gateway"}
	if len(r.Body) > 0 {
		h["content-length"] = strconv.Itoa(len(r.Body)) // Envoy passes the client's
	}
	for k, v := range r.Headers {
		h[k] = v
	}
	hasBody := len(r.Body) > 0 && r.Mode != filterv3.ProcessingMode_NONE
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(h), EndOfStream: len(r.Body) == 0 && !r.Trailers}}}
	if !r.NoProtocolConfig {
		first.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: r.Mode, ResponseBodyMode: r.ResponseMode}
	}
	if r.Subset != nil {
		var v *structpb.Value
		if r.SubsetString {
			s := ""
			for i, e := range r.Subset {
				if i > 0 {
					s += ","
				}
				s += e
			}
			v = structpb.NewStringValue(s)
		} else {
			l := &structpb.ListValue{}
			for _, e := range r.Subset {
				l.Values = append(l.Values, structpb.NewStringValue(e))
			}
			v = structpb.NewListValue(l)
		}
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": v}}}}
	}
	if err := x.st.Send(first); err != nil {
		return err
	}
	if r.Mode == filterv3.ProcessingMode_BUFFERED {
		if !hasBody {
			return x.readPick(false, false)
		}
		if err := x.readPick(false, false); err != nil || x.Pick.Immediate != nil {
			return err
		}
		if err := x.st.Send(bodyMsg(r.Body, !r.Trailers)); err != nil {
			return err
		}
		if err := x.readPick(false, false); err != nil || x.Pick.Immediate != nil || !r.Trailers {
			return err
		}
		if err := x.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(map[string]string{"x-trailer": "1"})}}}); err != nil {
			return err
		}
		return x.readPick(false, true)
	}
	if early, err := x.sendStreamed(hasBody); early || err != nil {
		return err
	}
	return x.readPick(hasBody && r.Mode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, r.Trailers)
}

// sendStreamed sends the body in chunks and the trailers, as Envoy
// streams them. A processor that answers early (an immediate response to
// a body over its limit) ends the stream: gRPC's Send then returns
// io.EOF and the answer is read by Recv, as Envoy stops sending and reads
// it; early reports that answer read.
func (x *Exchange) sendStreamed(hasBody bool) (early bool, err error) {
	r := x.req
	send := func(m *extprocv3.ProcessingRequest) (bool, error) {
		if err := x.st.Send(m); errors.Is(err, io.EOF) {
			return true, x.readPick(false, false)
		} else if err != nil {
			return true, err
		}
		return false, nil
	}
	if hasBody {
		chunk := r.ChunkSize
		if chunk <= 0 {
			chunk = len(r.Body)
		}
		for off := 0; off < len(r.Body); off += chunk {
			end := min(off+chunk, len(r.Body))
			if stop, err := send(bodyMsg(r.Body[off:end], end == len(r.Body) && !r.Trailers)); stop {
				return true, err
			}
		}
	}
	if r.Trailers {
		return send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(map[string]string{"x-trailer": "1"})}}})
	}
	return false, nil
}

func bodyMsg(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// readPick reads answers until the request phase is answered: one
// answer, or (full duplex) the headers' answer and the body sent back
// to its end (its end of stream, or the trailers' answer).
func (x *Exchange) readPick(streamedBody, trailers bool) error {
	p := &x.Pick
	if p.Headers == nil {
		p.Headers = map[string]string{}
	}
	bodyDone, trailersDone := !streamedBody, !trailers
	for {
		resp, err := x.st.Recv()
		if err != nil {
			return fmt.Errorf("extproctest: request phase: %w", err)
		}
		if md := resp.GetDynamicMetadata(); md != nil {
			p.Destination = md.GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
		}
		var common *extprocv3.CommonResponse
		switch v := resp.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			p.Immediate = v.ImmediateResponse
			return nil
		case *extprocv3.ProcessingResponse_RequestHeaders:
			x.answered = true
			common = v.RequestHeaders.GetResponse()
		case *extprocv3.ProcessingResponse_RequestBody:
			common = v.RequestBody.GetResponse()
			if sr := common.GetBodyMutation().GetStreamedResponse(); sr != nil {
				p.Body = append(p.Body, sr.GetBody()...)
				p.Chunks++
				p.BodyEOS = sr.GetEndOfStream()
				if sr.GetEndOfStream() {
					bodyDone = true
				}
			} else if common.GetBodyMutation() != nil {
				p.BodyMutated = true
			}
			if !streamedBody {
				x.answered = true // a BUFFERED body answer ends the phase
			}
		case *extprocv3.ProcessingResponse_RequestTrailers:
			trailersDone, bodyDone = true, true
		default:
			return fmt.Errorf("extproctest: request phase: unexpected answer %T", v)
		}
		for _, o := range common.GetHeaderMutation().GetSetHeaders() {
			p.Headers[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
		}
		if common.GetClearRouteCache() {
			p.ClearRouteCache = true
		}
		if x.answered && bodyDone && trailersDone {
			return nil
		}
	}
}

// Respond sends the response phase as Envoy does, reads the
// processor's answers, then ends the stream.
func (x *Exchange) Respond(r Response) (*Answered, error) {
	defer x.CloseSend()
	status := r.Status
	if status == 0 {
		status = 200
	}
	h := map[string]string{":status": strconv.Itoa(status)}
	if r.ContentType != "" {
		h["content-type"] = r.ContentType
	}
	mode := x.req.ResponseMode
	hasBody := len(r.Chunks) > 0 && mode != filterv3.ProcessingMode_NONE
	msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(h), EndOfStream: len(r.Chunks) == 0 && !r.Trailers}}}
	if r.Served != "" {
		msg.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-served": structpb.NewStringValue(r.Served)}}}}
	}
	a := &Answered{Headers: map[string]string{}}
	if err := x.st.Send(msg); err != nil {
		return nil, err
	}
	if err := x.readResponse(a, func(resp *extprocv3.ProcessingResponse) bool { return resp.GetResponseHeaders() != nil }); err != nil {
		return nil, err
	}
	if hasBody {
		if mode == filterv3.ProcessingMode_BUFFERED {
			var all []byte
			for _, c := range r.Chunks {
				all = append(all, c...)
			}
			if err := x.st.Send(respBody(all, !r.Trailers)); err != nil {
				return nil, err
			}
			if err := x.readResponse(a, func(resp *extprocv3.ProcessingResponse) bool { return resp.GetResponseBody() != nil }); err != nil {
				return nil, err
			}
		} else {
			for i, c := range r.Chunks {
				last := i == len(r.Chunks)-1
				if err := x.st.Send(respBody(c, last && !r.Trailers)); err != nil {
					return nil, err
				}
				// Envoy does not wait in this mode; the answer to each
				// chunk is read here only to see it in order.
				if err := x.readResponse(a, func(resp *extprocv3.ProcessingResponse) bool { return resp.GetResponseBody() != nil }); err != nil {
					return nil, err
				}
				if r.Between != nil && !last {
					r.Between(i)
				}
			}
		}
	}
	if r.Trailers {
		if err := x.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(map[string]string{"x-trailer": "1"})}}}); err != nil {
			return nil, err
		}
		if err := x.readResponse(a, func(resp *extprocv3.ProcessingResponse) bool { return resp.GetResponseTrailers() != nil }); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func respBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

func (x *Exchange) readResponse(a *Answered, want func(*extprocv3.ProcessingResponse) bool) error {
	resp, err := x.st.Recv()
	if err != nil {
		return fmt.Errorf("extproctest: response phase: %w", err)
	}
	if !want(resp) {
		return fmt.Errorf("extproctest: response phase: unexpected answer %T", resp.GetResponse())
	}
	var common *extprocv3.CommonResponse
	if h := resp.GetResponseHeaders(); h != nil {
		common = h.GetResponse()
	} else if b := resp.GetResponseBody(); b != nil {
		common = b.GetResponse()
		a.Body = append(a.Body, common.GetBodyMutation().GetStreamedResponse().GetBody()...)
	}
	for _, o := range common.GetHeaderMutation().GetSetHeaders() {
		a.Headers[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	return nil
}

// CloseSend ends the stream from the data plane's side and waits for the
// processor to end it (io.EOF); an error other than the end is returned.
func (x *Exchange) CloseSend() error {
	if err := x.st.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := x.st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
