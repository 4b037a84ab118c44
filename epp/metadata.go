package epp

import (
	"net"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The Endpoint Picker Protocol's names, as
// kubernetes-sigs/gateway-api-inference-extension v1.6.0 defines them
// (docs/proposals/004-endpoint-picker-protocol, pkg/lwepp/metadata/consts.go);
// contract §14.2.
const (
	// SubsetNamespace is the filter metadata namespace of the subset
	// hint in a ProcessingRequest's metadata_context.
	SubsetNamespace = "envoy.lb.subset_hint"
	// SubsetKey is the subset hint's key: the endpoints (ip:port, or ip
	// for any port of it) the picker must pick from, a list of strings
	// or one comma-separated string.
	SubsetKey = "x-gateway-destination-endpoint-subset"
	// DestinationNamespace is the dynamic metadata namespace of the pick
	// in the picker's answer, and of the served endpoint in the response
	// phase's metadata_context.
	DestinationNamespace = "envoy.lb"
	// DestinationKey is the header and the dynamic metadata key of the
	// pick: "ip:port" of the pick, then its fallbacks, comma separated.
	DestinationKey = "x-gateway-destination-endpoint"
	// ServedKey is the metadata key, under DestinationNamespace, of the
	// endpoint that served the request ("ip:port").
	ServedKey = "x-gateway-destination-endpoint-served"
)

// The response headers the picker adds, as the proxy's (contract §12.8):
// which replica served the request, why, and how many prompt tokens its
// hint said it holds.
const (
	HeaderReplica       = "x-inference-cache-replica"
	HeaderReason        = "x-inference-cache-reason"
	HeaderMatchedTokens = "x-inference-cache-matched-tokens"
)

// subset is the subset hint of one request.
type subset struct {
	set   bool                // the key was present (an empty list is an empty subset)
	addrs map[string]struct{} // ip:port
	hosts map[string]struct{} // ip alone: any port of it
}

// readSubset reads the subset hint from a request's metadata_context.
// As the reference picker, it takes a list of strings or one string,
// each possibly comma-separated; an entry without a port admits every
// port of that address.
func readSubset(md *corev3.Metadata) subset {
	ns := md.GetFilterMetadata()[SubsetNamespace]
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return subset{}
	}
	s := subset{set: true}
	add := func(list string) {
		for _, e := range strings.Split(list, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(e); err == nil {
				if s.addrs == nil {
					s.addrs = map[string]struct{}{}
				}
				s.addrs[e] = struct{}{}
				continue
			}
			if s.hosts == nil {
				s.hosts = map[string]struct{}{}
			}
			s.hosts[strings.Trim(e, "[]")] = struct{}{}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if sv, ok := e.GetKind().(*structpb.Value_StringValue); ok {
				add(sv.StringValue)
			}
		}
	}
	return s
}

// admits reports whether the subset allows the endpoint at addr
// (ip:port).
func (s *subset) admits(addr string) bool {
	if !s.set {
		return true
	}
	if _, ok := s.addrs[addr]; ok {
		return true
	}
	if len(s.hosts) > 0 {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			_, ok := s.hosts[h]
			return ok
		}
	}
	return false
}

// servedEndpoint reads the served endpoint from a response phase's
// metadata_context ("" when the data plane did not say).
func servedEndpoint(md *corev3.Metadata) string {
	v := md.GetFilterMetadata()[DestinationNamespace].GetFields()[ServedKey]
	return strings.TrimSpace(v.GetStringValue())
}

// destinationMetadata is the answer's dynamic metadata: value under
// envoy.lb / x-gateway-destination-endpoint.
func destinationMetadata(value string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationKey: structpb.NewStringValue(value),
		}}),
	}}
}

// header returns the value of the header key (lower case, as Envoy
// sends HTTP/2-style names) in hm: raw_value when set, else value.
func header(hm *corev3.HeaderMap, key string) string {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() == key {
			if len(h.GetRawValue()) > 0 {
				return string(h.GetRawValue())
			}
			return h.GetValue()
		}
	}
	return ""
}
