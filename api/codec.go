package api

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/api/internal/lenientpb"
)

// lookupCodec is the server's gRPC codec: standard protobuf, except for
// requests the protobuf runtime refuses (a string field that is not valid
// UTF-8, or bytes that are not protobuf at all), which gRPC would answer
// with INTERNAL "failed to unmarshal" before any handler runs (a codec
// error cannot choose its gRPC code). A LookupRouteRequest still reaches
// the handler, which answers NO_HINT with a detail (contract §5.7 fail-open); a
// write request with non-UTF-8 strings is decoded leniently so the
// validator rejects the offending events naming the field (contract §9.3); any
// other request of the InferenceCache and Cluster services is handed on
// marked undecodable (markUndecodable), and refuseUndecodable answers it
// INVALID_ARGUMENT naming what could not be decoded. Requests of other
// services (raftnode's forwarding) keep gRPC's INTERNAL.
type lookupCodec struct{}

// undecodable marks a LookupRouteRequest whose bytes are not protobuf; it is
// not valid UTF-8, so no real request can carry it.
const undecodable = "\xff\x00undecodable"

func (lookupCodec) Name() string { return "proto" }

func (lookupCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }

func (lookupCodec) Unmarshal(data []byte, v any) error {
	m := v.(proto.Message)
	err := proto.Unmarshal(data, m)
	if err == nil {
		if len(m.ProtoReflect().GetUnknown()) > 0 {
			stripUndecodable(m) // a client cannot forge the mark
		}
		return nil
	}
	switch w := v.(type) {
	case *pb.LookupRouteRequest:
		w.Reset()
		if !decodeLookupLenient(data, w) {
			w.Reset()
			w.HashScheme = undecodable
		}
		return nil
	case *pb.IngestRequest:
		if decodeIngestLenient(data, w) {
			return nil
		}
	case *pb.ReportReplicaStatsRequest:
		if decodeStatsLenient(data, w) {
			return nil
		}
	}
	if !refusable[m.ProtoReflect().Descriptor().FullName()] {
		return err
	}
	markUndecodable(m, data, err)
	return nil
}

// decodeLookupLenient decodes a LookupRouteRequest keeping string fields
// as their raw bytes, valid UTF-8 or not; false when data is not protobuf.
func decodeLookupLenient(b []byte, r *pb.LookupRouteRequest) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 1:
				r.PrefixHash = v
			case 2:
				r.BlockHashes = append(r.BlockHashes, v)
			case 3:
				r.BlockTokenCounts = append(r.BlockTokenCounts, uint32(v))
			case 4:
				r.TokenIds = append(r.TokenIds, uint32(v))
			case 11:
				r.MaxReplicas = uint32(v)
			}
		case typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 2, 3, 4: // packed repeated varints
				for len(v) > 0 {
					x, m := protowire.ConsumeVarint(v)
					if m < 0 {
						return false
					}
					v = v[m:]
					switch num {
					case 2:
						r.BlockHashes = append(r.BlockHashes, x)
					case 3:
						r.BlockTokenCounts = append(r.BlockTokenCounts, uint32(x))
					default:
						r.TokenIds = append(r.TokenIds, uint32(x))
					}
				}
			case 5:
				r.PromptText = string(v)
			case 6:
				r.ModelId = string(v)
			case 7:
				r.TenantId = string(v)
			case 8:
				r.AdapterId = string(v)
			case 9:
				r.HashScheme = string(v)
			case 10:
				slo := &pb.Slo{}
				if proto.Unmarshal(v, slo) != nil {
					return false
				}
				r.Slo = slo
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}

// checkUTF8 returns the NO_HINT detail for a request the codec let through
// with bytes protobuf refuses, "" otherwise. prompt_text is left to the
// tokenizer, which checks it anyway.
func checkUTF8(req *pb.LookupRouteRequest) string {
	switch {
	case req.HashScheme == undecodable:
		return DetailUndecodable
	case !utf8.ValidString(req.HashScheme):
		return "hash_scheme is not valid UTF-8"
	case !utf8.ValidString(req.ModelId):
		return "model_id is not valid UTF-8"
	case !utf8.ValidString(req.TenantId):
		return "tenant_id is not valid UTF-8"
	case !utf8.ValidString(req.AdapterId):
		return "adapter_id is not valid UTF-8"
	case !utf8.ValidString(req.CacheSalt):
		return "cache_salt is not valid UTF-8"
	}
	return ""
}

// decodeIngestLenient decodes a write the protobuf runtime refused through
// its bytes-typed twin, keeping strings that are not UTF-8 as they are; the
// validator then rejects those events one by one, naming the field. It
// reports false for bytes that are not protobuf at all.
func decodeIngestLenient(data []byte, w *pb.IngestRequest) bool {
	var l lenientpb.IngestRequest
	if proto.Unmarshal(data, &l) != nil {
		return false
	}
	w.Reset()
	w.RequestId = string(l.RequestId)
	w.Events = make([]*pb.BlockEvent, len(l.Events))
	for i, e := range l.Events {
		w.Events[i] = &pb.BlockEvent{Kind: pb.BlockEvent_Kind(e.Kind), ReplicaId: string(e.ReplicaId), HashScheme: string(e.HashScheme),
			ModelId: string(e.ModelId), TenantId: string(e.TenantId), AdapterId: string(e.AdapterId),
			BlockHashes: e.BlockHashes, BlockTokenCounts: e.BlockTokenCounts, TokenIds: e.TokenIds, BlockSize: e.BlockSize,
			PrefixTokensBefore: e.PrefixTokensBefore, ObservedAtMs: e.ObservedAtMs}
	}
	return true
}

// decodeStatsLenient is decodeIngestLenient for replica stats.
func decodeStatsLenient(data []byte, w *pb.ReportReplicaStatsRequest) bool {
	var l lenientpb.ReportReplicaStatsRequest
	if proto.Unmarshal(data, &l) != nil {
		return false
	}
	w.Reset()
	w.RequestId = string(l.RequestId)
	w.Stats = make([]*pb.ReplicaStats, len(l.Stats))
	for i, s := range l.Stats {
		st := &pb.ReplicaStats{ReplicaId: string(s.ReplicaId), ModelId: string(s.ModelId), Pressure: s.Pressure,
			ObservedAtMs: s.ObservedAtMs, Endpoint: string(s.Endpoint),
			WaitingRequests: s.WaitingRequests, RunningRequests: s.RunningRequests}
		for _, h := range s.HashSchemes {
			st.HashSchemes = append(st.HashSchemes, string(h))
		}
		if len(s.TenantHitRate) > 0 {
			st.TenantHitRate = make(map[string]float64, len(s.TenantHitRate))
			for _, hr := range s.TenantHitRate {
				st.TenantHitRate[string(hr.Key)] = hr.Value
			}
		}
		w.Stats[i] = st
	}
	return true
}
