package api

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/metrics"
)

// PanicMessage is the message of the INTERNAL status a recovered panic is
// answered with: no panic value reaches a client, it may hold request or
// other tenants' data.
const PanicMessage = "internal error: the server recovered from a fault handling this call (logged)"

// recoveryOptions turn a panic in any handler or interceptor of the
// server (both services, health, reflection and the forwarding service)
// into INTERNAL with PanicMessage, a logged stack and
// inferencecache_rpc_panics_total, and keep the process serving (contract §9.6).
// They go first, so they wrap every other interceptor. LookupRoute
// recovers on its own and fails open to NO_HINT before this is reached.
func recoveryOptions(log *slog.Logger, m *metrics.Metrics) []grpc.ServerOption {
	if log == nil {
		log = slog.Default()
	}
	handler := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		log.Error("panic in gRPC handler recovered; answered INTERNAL", "method", method, "panic", p, "stack", string(debug.Stack()))
		m.RPCPanic(method)
		return status.Error(codes.Internal, PanicMessage)
	})
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(handler)),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(handler)),
	}
}
