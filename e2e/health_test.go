package e2e

import (
	"sort"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

func checkHealthReflection(t *testing.T, c *cluster) {
	for _, p := range c.procs {
		hc := healthpb.NewHealthClient(p.conn)
		for _, svc := range []string{"", "inferencecache.v1.InferenceCache", "inferencecache.v1.Cluster"} {
			ctx, cancel := ctxT(5 * time.Second)
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			cancel()
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s health(%q) = %v, %v; want SERVING", p.id, svc, r, err)
			}
		}
	}
	rc := reflectionpb.NewServerReflectionClient(c.procs[0].conn)
	ctx, cancel := ctxT(5 * time.Second)
	defer cancel()
	st, err := rc.ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	joined := strings.Join(names, ",")
	for _, want := range []string{"inferencecache.v1.Cluster", "inferencecache.v1.InferenceCache", "grpc.health.v1.Health"} {
		if !strings.Contains(joined, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}
