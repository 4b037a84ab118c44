package client

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// The fail-open answer of a lookup the server refused for its token names
// the refusal; a timeout, an unreachable node and a served answer do not.
func TestRefusedLookup_NamesATokenRefusalOnly(t *testing.T) {
	for _, c := range []struct {
		f    *fake
		want string
	}{
		{&fake{lookupErr: status.Error(codes.Unauthenticated, "this call needs the lookup token")}, "Unauthenticated"},
		{&fake{lookupErr: status.Error(codes.PermissionDenied, "lesser class")}, "PermissionDenied"},
		{&fake{delay: 5 * time.Second}, ""},
		{&fake{lookupErr: status.Error(codes.Unavailable, "down")}, ""},
		{&fake{name: "n1"}, ""},
	} {
		cl := newClient(t, Config{Addrs: []string{serve(t, c.f)}, LookupTimeout: 100 * time.Millisecond})
		r := cl.LookupRoute(context.Background(), &pb.LookupRouteRequest{})
		if got := RefusedLookup(r); got != c.want {
			t.Errorf("answer %v: RefusedLookup %q, want %q", r, got, c.want)
		}
	}
}
