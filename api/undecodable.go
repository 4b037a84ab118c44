package api

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Requests whose bytes cannot be decoded. gRPC turns any codec error into
// INTERNAL "failed to unmarshal" and writes that status itself, before a
// handler or interceptor runs; but a client sending bytes that are not the
// request (not protobuf, or a string field that is not UTF-8) made an
// invalid argument, and should be told which part. So lookupCodec does not
// fail on such a request of the InferenceCache or Cluster services: it
// resets the message and records the problem in it, as an unknown field
// (undecodableField) no client can set (the codec strips it from decoded
// requests), and refuseUndecodable answers INVALID_ARGUMENT with it.

// undecodableField is the unknown field holding the problem: the largest
// valid field number, which no message of ours uses.
const undecodableField = protowire.MaxValidNumber

// refusable holds the request messages of the InferenceCache and Cluster
// services, which refuseUndecodable guards, except LookupRouteRequest
// (which fails open, see lookupCodec).
var refusable = func() map[protoreflect.FullName]bool {
	out := map[protoreflect.FullName]bool{}
	svcs := pb.File_api_inferencecache_v1_inferencecache_proto.Services()
	for _, name := range []protoreflect.Name{"InferenceCache", "Cluster"} {
		methods := svcs.ByName(name).Methods()
		for i := range methods.Len() {
			out[methods.Get(i).Input().FullName()] = true
		}
	}
	delete(out, (&pb.LookupRouteRequest{}).ProtoReflect().Descriptor().FullName())
	return out
}()

// markUndecodable resets m and records why data is not a valid m.
func markUndecodable(m proto.Message, data []byte, err error) {
	md := m.ProtoReflect().Descriptor()
	why := decodeProblem(data, md, "")
	if why == "" {
		why = err.Error()
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	mark = protowire.AppendString(mark, fmt.Sprintf("request bytes are not a valid %s: %s", md.Name(), why))
	m.ProtoReflect().SetUnknown(mark)
}

// undecodableMessage returns the problem markUndecodable recorded in m, if
// any.
func undecodableMessage(m any) (string, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return "", false
	}
	for b := pm.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if num == undecodableField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return string(v), true
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return "", false
		}
		b = b[n:]
	}
	return "", false
}

// stripUndecodable removes the mark from a request a client sent with it.
func stripUndecodable(m proto.Message) {
	if _, ok := undecodableMessage(m); !ok {
		return
	}
	var keep []byte
	for b := m.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		k := protowire.ConsumeFieldValue(num, typ, b[n:])
		if k < 0 {
			break
		}
		if num != undecodableField {
			keep = append(keep, b[:n+k]...)
		}
		b = b[n+k:]
	}
	m.ProtoReflect().SetUnknown(keep)
}

// undecodableError is the INVALID_ARGUMENT status of a marked request.
type undecodableError struct{ msg string }

func (e *undecodableError) Error() string { return e.msg }

// GRPCStatus makes the error an INVALID_ARGUMENT status for gRPC.
func (e *undecodableError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.msg)
}

// refuseUndecodable is the unary interceptor that answers a request marked
// undecodable with INVALID_ARGUMENT naming the problem.
func refuseUndecodable(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if msg, ok := undecodableMessage(req); ok {
		return nil, &undecodableError{msg}
	}
	return handler(ctx, req)
}

// refuseUndecodableStream is refuseUndecodable for streaming RPCs: RecvMsg
// returns an *undecodableError for a marked message. The stream itself is
// intact (the message was framed correctly), so a handler may go on
// (IngestStream answers it as a request refused whole).
func refuseUndecodableStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, undecodableStream{ss})
}

type undecodableStream struct{ grpc.ServerStream }

func (s undecodableStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if msg, ok := undecodableMessage(m); ok {
		return &undecodableError{msg}
	}
	return nil
}

// decodeProblem names what in b cannot be decoded as a message of md: the
// path of a string field that is not valid UTF-8 ("policy.block_size.key",
// "events[2].replica_id"), or the field at which the wire format breaks.
// It returns "" when it finds nothing (the caller then uses the protobuf
// runtime's error).
func decodeProblem(b []byte, md protoreflect.MessageDescriptor, path string) string {
	seen := map[protowire.Number]int{}
	for off := 0; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Sprintf("%snot protobuf: no valid field tag at byte %d", in(path), off)
		}
		fd := md.Fields().ByNumber(num)
		name := fmt.Sprintf("field %d", num)
		if fd != nil {
			name = string(fd.Name())
			if fd.IsList() {
				name = fmt.Sprintf("%s[%d]", name, seen[num])
			}
			seen[num]++
		}
		k := protowire.ConsumeFieldValue(num, typ, b[n:])
		if k < 0 {
			return fmt.Sprintf("%s%s is truncated or malformed (at byte %d)", in(path), name, off)
		}
		v := b[n : n+k]
		b, off = b[n+k:], off+n+k
		if fd == nil || typ != protowire.BytesType {
			continue
		}
		content, _ := protowire.ConsumeBytes(v)
		full := name
		if path != "" {
			full = path + "." + name
		}
		switch {
		case fd.Kind() == protoreflect.StringKind:
			if !utf8.Valid(content) {
				return full + " is not valid UTF-8"
			}
		case fd.Kind() == protoreflect.MessageKind:
			// A map entry is a message with fields key and value.
			if p := decodeProblem(content, fd.Message(), full); p != "" {
				return p
			}
		}
	}
	return ""
}

// in prefixes a problem inside a nested message with its path.
func in(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}
