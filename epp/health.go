package epp

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The gRPC health services, as the Endpoint Picker Protocol names them
// (docs/proposals/004-endpoint-picker-protocol, Health Checking; contract
// §14.4).
const (
	// HealthLiveness is SERVING while the process answers.
	HealthLiveness = "liveness"
	// HealthReadiness is SERVING once the endpoints are known (the static
	// list set, or the InferencePool's informers synced). There is no
	// leader: every picker replica is ready.
	HealthReadiness = "readiness"
	// HealthExtProc is envoy.service.ext_proc.v3.ExternalProcessor: as
	// readiness.
	HealthExtProc = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Health is grpc.health.v1.Health over a Table: liveness always
// SERVING; readiness, ext_proc and "" (the whole server) SERVING once
// the table is synced, else NOT_SERVING; any other name SERVICE_UNKNOWN
// (as the reference EPP answers, rather than a NotFound error). Watch is
// not served (Unimplemented): the data planes and kubelet poll Check.
type Health struct {
	healthpb.UnimplementedHealthServer
	t        *Table
	draining atomic.Bool
}

// Drain makes readiness (and the ext_proc service's status) NOT_SERVING
// from now on, while liveness stays SERVING and streams are still
// served: Kubernetes and Envoy stop sending before the picker stops.
func (h *Health) Drain() { h.draining.Store(true) }

// NewHealth returns the health service of the endpoints t.
func NewHealth(t *Table) *Health { return &Health{t: t} }

// Register registers h on g.
func (h *Health) Register(g *grpc.Server) { healthpb.RegisterHealthServer(g, h) }

// Check implements grpc.health.v1.Health.Check.
func (h *Health) Check(_ context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	switch in.GetService() {
	case HealthLiveness:
		st = healthpb.HealthCheckResponse_SERVING
	case HealthReadiness, HealthExtProc, "":
		if h.t.Synced() && !h.draining.Load() {
			st = healthpb.HealthCheckResponse_SERVING
		}
	default:
		st = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List implements grpc.health.v1.Health.List: the three services.
func (h *Health) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, s := range []string{HealthLiveness, HealthReadiness, HealthExtProc} {
		r, _ := h.Check(ctx, &healthpb.HealthCheckRequest{Service: s})
		out.Statuses[s] = r
	}
	return out, nil
}
