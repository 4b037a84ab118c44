package epp

import (
	"fmt"
	"strings"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// BodyMode is an ext_proc body send mode (ProcessingMode.BodySendMode).
// The picker serves two (contract §14.2):
//
//   - FULL_DUPLEX_STREAMED: the data plane sends the headers and the body
//     chunks without waiting; the picker holds the headers' answer until
//     the body's end of stream, then answers the headers (the pick), then
//     sends the body back in chunks (the data plane forwards only what the
//     processor returns in this mode). Response body chunks are sent back
//     as they come.
//   - BUFFERED: the data plane waits for the headers' answer (an empty
//     CONTINUE), then sends the whole body; the body's answer carries the
//     pick (header mutation, clear_route_cache, dynamic metadata) and no
//     body mutation.
//
// With NONE, or a mode it does not serve (STREAMED, BUFFERED_PARTIAL,
// GRPC), the picker picks at the request headers, by load, without a key.
type BodyMode = filterv3.ProcessingMode_BodySendMode

// Body modes.
const (
	ModeNone               = filterv3.ProcessingMode_NONE
	ModeBuffered           = filterv3.ProcessingMode_BUFFERED
	ModeFullDuplexStreamed = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// ParseBodyMode reads a mode name as Envoy spells it (FULL_DUPLEX_STREAMED,
// BUFFERED; case-insensitive).
func ParseBodyMode(s string) (BodyMode, error) {
	switch strings.ToUpper(s) {
	case "FULL_DUPLEX_STREAMED":
		return ModeFullDuplexStreamed, nil
	case "BUFFERED":
		return ModeBuffered, nil
	}
	return 0, fmt.Errorf("body mode %q: want FULL_DUPLEX_STREAMED or BUFFERED", s)
}

// maxChunkBytes bounds one body chunk the picker sends back, as the
// reference EPP (pkg/common/envoy/chunking.go: some data planes cap a
// streamed chunk at 64 KiB).
const maxChunkBytes = 62000

// configure takes the stream's body modes from the first message's
// protocol_config, when the data plane sends one.
func (x *exchange) configure(req *extprocv3.ProcessingRequest) {
	if pc := req.GetProtocolConfig(); pc != nil {
		x.reqMode, x.rspMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
}

// bodyChunks appends the responses that send body back to the data
// plane in FULL_DUPLEX_STREAMED mode: chunks of at most maxChunkBytes,
// the last with eos (one empty chunk for an empty body).
func bodyChunks(out []*extprocv3.ProcessingResponse, body []byte, eos bool) []*extprocv3.ProcessingResponse {
	for {
		n := min(len(body), maxChunkBytes)
		last := n == len(body)
		out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
					Body: body[:n], EndOfStream: eos && last}}}}}}})
		body = body[n:]
		if last {
			return out
		}
	}
}
