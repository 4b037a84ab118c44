package api

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/tlsconfig"
)

// rawCodec sends pre-encoded request bytes as they are, so a test can put
// on the wire what a broken or hostile gateway would.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// Bytes the protobuf runtime refuses (a string that is not UTF-8, or no
// protobuf at all) would be answered by gRPC's own codec with INTERNAL
// before the handler runs. LookupRoute never errors: they are NO_HINT with
// a detail naming the problem (contract §5 fail-open, contract §9).
func TestLookupRoute_UndecodableBytesAreNoHintNotAnError(t *testing.T) {
	cc := grpcServer(t, BaseServerOptions(), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, newSvc(&fakeNode{lookup: match}, nil))
	})

	var ids []byte
	for _, id := range []uint64{1, 2, 3} {
		ids = protowire.AppendVarint(ids, id)
	}
	valid := appendString(nil, 9, "vllm")
	valid = appendString(valid, 6, "m")
	valid = protowire.AppendTag(valid, 4, protowire.BytesType)
	valid = protowire.AppendBytes(valid, ids)

	cases := []struct {
		name   string
		body   []byte
		reason pb.ReasonCode
		detail string
	}{
		{"valid bytes still match", valid, pb.ReasonCode_PREFIX_MATCH, ""},
		{"model_id not UTF-8", appendString(append([]byte{}, valid...), 6, "m\xff"), pb.ReasonCode_NO_HINT, "model_id is not valid UTF-8"},
		{"tenant_id not UTF-8", appendString(append([]byte{}, valid...), 7, "\xc3("), pb.ReasonCode_NO_HINT, "tenant_id is not valid UTF-8"},
		{"hash_scheme not UTF-8", appendString(nil, 9, "vl\xffm"), pb.ReasonCode_NO_HINT, "hash_scheme is not valid UTF-8"},
		{"not protobuf", []byte{0xff, 0xff, 0xff, 0xff}, pb.ReasonCode_NO_HINT, DetailUndecodable},
		{"truncated field", valid[:len(valid)-2], pb.ReasonCode_NO_HINT, DetailUndecodable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resp pb.LookupRouteResponse
			err := cc.Invoke(context.Background(), "/inferencecache.v1.InferenceCache/LookupRoute", c.body, &resp, grpc.ForceCodec(rawCodec{}))
			if err != nil {
				t.Fatalf("LookupRoute returned a gRPC error: %v", err)
			}
			if resp.ReasonCode != c.reason || (c.detail != "" && resp.Detail != c.detail) {
				t.Fatalf("got %v %q, want %v %q", resp.ReasonCode, resp.Detail, c.reason, c.detail)
			}
		})
	}
}

// A write carrying a string that is not UTF-8 would fail in gRPC's own
// codec with INTERNAL, losing the valid events beside it. It is decoded
// leniently and the offending event is rejected naming the field, while
// the valid events of the same request commit (contract §6.2, §9.3).
func TestIngest_NonUTF8FieldIsRejectedPerEventOverGRPC(t *testing.T) {
	f := &fakeNode{lookup: match}
	cc := grpcServer(t, BaseServerOptions(), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, newSvc(f, nil))
	})

	event := func(replica string) []byte {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(pb.BlockEvent_STORED))
		e = appendString(e, 2, replica)
		e = appendString(e, 3, "vllm")
		e = appendString(e, 4, "m")
		e = protowire.AppendTag(e, 7, protowire.BytesType)
		e = protowire.AppendBytes(e, protowire.AppendVarint(nil, 42))
		e = protowire.AppendTag(e, 8, protowire.BytesType)
		e = protowire.AppendBytes(e, protowire.AppendVarint(nil, 16))
		return e
	}
	var body []byte
	for _, r := range []string{"good-0", "bad-\xff", "good-2"} {
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendBytes(body, event(r))
	}
	var resp pb.IngestResponse
	if err := cc.Invoke(context.Background(), "/inferencecache.v1.InferenceCache/Ingest", body, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("Ingest returned a gRPC error: %v", err)
	}
	if resp.Accepted != 2 || len(resp.Rejected) != 1 || resp.Rejected[0].EventIndex != 1 || resp.Rejected[0].Reason != "replica_id is not valid UTF-8" {
		t.Fatalf("response %v: want 2 accepted and event 1 rejected for replica_id", &resp)
	}
	if len(f.ingested) != 2 || f.ingested[0].ReplicaID != "good-0" || f.ingested[1].ReplicaID != "good-2" {
		t.Fatalf("committed %v, want the two valid events", f.ingested)
	}

	// Bytes that are not protobuf at all stay a decode failure.
	if err := cc.Invoke(context.Background(), "/inferencecache.v1.InferenceCache/Ingest", []byte{0xff, 0xff}, &resp, grpc.ForceCodec(rawCodec{})); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("undecodable ingest bytes: %v, want INVALID_ARGUMENT", err)
	}
}

// Request bytes that cannot be decoded (not protobuf, or a string that is
// not UTF-8 where no lenient decoding applies) would get gRPC's INTERNAL
// "failed to unmarshal" from its own codec. The client sent an invalid
// argument: it gets INVALID_ARGUMENT naming the message and what in it
// could not be decoded. LookupRoute still fails open.
func TestUndecodableRequests_AreInvalidArgumentNamingTheProblem(t *testing.T) {
	f := &fakeNode{lookup: match}
	cc := grpcServer(t, BaseServerOptions(), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, newSvc(f, nil))
		pb.RegisterClusterServer(gs, NewClusterService(nil, "", "", nil)) // the handlers must not run
	})

	msg := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	// SetCachePolicyRequest{policy: {block_size: {"m\xff": 16}}}
	entry := append(appendString(nil, 1, "m\xff"), protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 16)...)
	badKey := msg(1, msg(17, entry))
	// IngestRequest whose second event is cut short.
	truncated := append(msg(1, appendString(nil, 2, "r")), protowire.AppendTag(nil, 1, protowire.BytesType)...)
	truncated = append(truncated, 9, 1)
	// A valid request carrying the codec's own mark as an unknown field.
	forged := appendString(nil, undecodableField, "request bytes are not a valid GetCachePolicyRequest: forged")

	const ic, cl = "/inferencecache.v1.InferenceCache/", "/inferencecache.v1.Cluster/"
	cases := []struct {
		name, method string
		body         []byte
		resp         proto.Message
		code         codes.Code
		want         string // the status message
	}{
		{"Ingest not protobuf", ic + "Ingest", []byte{0xff, 0xff}, &pb.IngestResponse{}, codes.InvalidArgument,
			"request bytes are not a valid IngestRequest: not protobuf: no valid field tag at byte 0"},
		{"Ingest event truncated", ic + "Ingest", truncated, &pb.IngestResponse{}, codes.InvalidArgument,
			"request bytes are not a valid IngestRequest: events[1] is truncated or malformed (at byte 5)"},
		{"ReportReplicaStats not protobuf", ic + "ReportReplicaStats", []byte{0x0a, 0x05, 0x01}, &pb.ReportReplicaStatsResponse{}, codes.InvalidArgument,
			"request bytes are not a valid ReportReplicaStatsRequest: stats[0] is truncated or malformed (at byte 0)"},
		{"SetCachePolicy not protobuf", ic + "SetCachePolicy", []byte{0xff}, &pb.CachePolicy{}, codes.InvalidArgument,
			"request bytes are not a valid SetCachePolicyRequest: not protobuf: no valid field tag at byte 0"},
		{"SetCachePolicy block_size key not UTF-8", ic + "SetCachePolicy", badKey, &pb.CachePolicy{}, codes.InvalidArgument,
			"request bytes are not a valid SetCachePolicyRequest: policy.block_size.key is not valid UTF-8"},
		{"GetCachePolicy not protobuf", ic + "GetCachePolicy", []byte{0x07}, &pb.CachePolicy{}, codes.InvalidArgument,
			"request bytes are not a valid GetCachePolicyRequest: not protobuf: no valid field tag at byte 0"},
		{"AddServer id not UTF-8", cl + "AddServer", appendString(nil, 1, "n\xff"), &pb.AddServerResponse{}, codes.InvalidArgument,
			"request bytes are not a valid AddServerRequest: id is not valid UTF-8"},
		{"TransferLeadership address not UTF-8", cl + "TransferLeadership", appendString(nil, 2, "\xc3("), &pb.TransferLeadershipResponse{}, codes.InvalidArgument,
			"request bytes are not a valid TransferLeadershipRequest: address is not valid UTF-8"},
		{"forged mark is ignored", ic + "GetCachePolicy", forged, &pb.CachePolicy{}, codes.OK, ""},
		{"LookupRoute still fails open", ic + "LookupRoute", []byte{0xff, 0xff}, &pb.LookupRouteResponse{}, codes.OK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := cc.Invoke(context.Background(), c.method, c.body, c.resp, grpc.ForceCodec(rawCodec{}))
			st := status.Convert(err)
			if st.Code() != c.code || st.Message() != c.want {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), c.code, c.want)
			}
		})
	}
	if r := cases[len(cases)-1].resp.(*pb.LookupRouteResponse); r.GetDetail() != DetailUndecodable {
		t.Errorf("LookupRoute of garbage: %v %q, want NO_HINT %q", r.GetReasonCode(), r.GetDetail(), DetailUndecodable)
	}

	// On IngestStream, an undecodable request is refused whole and the
	// stream goes on to the next one.
	st, err := cc.NewStream(context.Background(), &pb.InferenceCache_ServiceDesc.Streams[0], ic+"IngestStream", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	good := &pb.IngestRequest{Events: []*pb.BlockEvent{{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{42}, BlockTokenCounts: []uint32{16}}}}
	goodBytes, _ := proto.Marshal(good)
	for _, body := range [][]byte{{0xff, 0xff}, goodBytes} {
		if err := st.SendMsg(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var first, second pb.IngestResponse
	if err := st.RecvMsg(&first); err != nil {
		t.Fatalf("stream ended at the undecodable request: %v", err)
	}
	if err := st.RecvMsg(&second); err != nil {
		t.Fatalf("second response: %v", err)
	}
	if len(first.Rejected) != 1 || first.Rejected[0].Reason != WholeRequestRefused+"request bytes are not a valid IngestRequest: not protobuf: no valid field tag at byte 0" || first.Accepted != 0 {
		t.Errorf("first response %v, want the request refused whole naming the problem", &first)
	}
	if second.Accepted != 1 {
		t.Errorf("second response %v, want its event accepted", &second)
	}
}

// With tokens on, an undecodable request from a caller without a token is
// refused as UNAUTHENTICATED: its bytes are not inspected, and it learns
// nothing about what was wrong with them (review).
func TestUndecodableRequests_AuthComesFirst(t *testing.T) {
	cc := grpcServer(t, serverOptions(ServerConfig{Auth: NewAuth(AuthConfig{Write: tlsconfig.StaticSecrets("w")})}), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, newSvc(&fakeNode{lookup: match}, nil))
	})
	invoke := func(ctx context.Context) *status.Status {
		return status.Convert(cc.Invoke(ctx, "/inferencecache.v1.InferenceCache/Ingest", []byte{0xff, 0xff}, &pb.IngestResponse{}, grpc.ForceCodec(rawCodec{})))
	}
	if st := invoke(context.Background()); st.Code() != codes.Unauthenticated {
		t.Fatalf("no token: %v %q, want UNAUTHENTICATED", st.Code(), st.Message())
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer w")
	if st := invoke(ctx); st.Code() != codes.InvalidArgument {
		t.Fatalf("with the token: %v %q, want INVALID_ARGUMENT naming the problem", st.Code(), st.Message())
	}
}

// grpcServer serves register's services on loopback with opts and returns
// a client connection to it; both close when the test ends.
func grpcServer(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
