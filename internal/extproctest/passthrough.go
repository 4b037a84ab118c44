package extproctest

import (
	"io"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// PassThrough is an ext_proc server that answers the Endpoint Picker
// Protocol without picking: the baseline of the picker's added latency.
// It sends the same messages the picker sends in FULL_DUPLEX_STREAMED
// mode (the headers' answer after the body's end of stream with the
// destination header and dynamic metadata, the body sent back, the
// response headers answered, the response body sent back), with the
// fixed Destination, and reads nothing of the body.
type PassThrough struct {
	extprocv3.UnimplementedExternalProcessorServer
	// Destination is the value of every answer.
	Destination string
}

// Process implements the ExternalProcessor service.
func (p *PassThrough) Process(srv grpc.BidiStreamingServer[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]) error {
	var body []byte
	for {
		req, err := srv.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var out []*extprocv3.ProcessingResponse
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if v.RequestHeaders.GetEndOfStream() {
				out = append(out, p.headers())
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			if v.RequestBody.GetEndOfStream() {
				out = append(out, p.headers(), &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
					RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
						Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: true}}}}}}})
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
						Body: v.ResponseBody.GetBody(), EndOfStream: v.ResponseBody.GetEndOfStream()}}}}}}})
		}
		for _, r := range out {
			if err := srv.Send(r); err != nil {
				return err
			}
		}
	}
}

func (p *PassThrough) headers() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"envoy.lb": structpb.NewStructValue(&structpb.Struct{
			Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint": structpb.NewStringValue(p.Destination)}})}},
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(p.Destination)}}}}}}},
	}
}
