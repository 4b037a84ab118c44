package api

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
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
// protobuf at all) used to be answered by gRPC itself with INTERNAL before
// the handler ran. LookupRoute never errors: they are NO_HINT with a
// detail naming the problem (SPEC 5 fail-open, SPEC 9).
func TestLookupRoute_UndecodableBytesAreNoHintNotAnError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(BaseServerOptions()...)
	pb.RegisterInferenceCacheServer(gs, newSvc(&fakeNode{lookup: match}, nil))
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

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

// A write carrying a string that is not UTF-8 used to fail in the gRPC
// codec with INTERNAL, losing the valid events beside it. It is decoded
// leniently and the offending event is rejected naming the field, while
// the valid events of the same request commit (SPEC 6, 9).
func TestIngest_NonUTF8FieldIsRejectedPerEventOverGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{lookup: match}
	gs := grpc.NewServer(BaseServerOptions()...)
	pb.RegisterInferenceCacheServer(gs, newSvc(f, nil))
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

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
	if err := cc.Invoke(context.Background(), "/inferencecache.v1.InferenceCache/Ingest", []byte{0xff, 0xff}, &resp, grpc.ForceCodec(rawCodec{})); err == nil {
		t.Fatal("undecodable ingest bytes were accepted")
	}
}
