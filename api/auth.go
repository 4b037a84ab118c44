package api

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// Class is the permission an RPC needs (contract §9.8 bearer tokens).
type Class int

const (
	// ClassOpen: no token, ever (health, reflection).
	ClassOpen Class = iota
	// ClassLookup: LookupRoute, GetCachePolicy, ReportPickerLoad and
	// SharePicks (the pickers that look up report their load and picks;
	// both are soft state that expires on its own); open unless a lookup
	// token is configured.
	ClassLookup
	// ClassWrite: Ingest, IngestStream, ReportReplicaStats,
	// SetCachePolicy.
	ClassWrite
	// ClassAdmin: the Cluster service (status, membership, leadership,
	// snapshots, digest, backup, restore).
	ClassAdmin
	// ClassPeer: raftnode's internal forwarding service (a follower's
	// writes and restores sent to the leader, picker load passed on). It needs the admin token
	// when one is configured, else the write token, else nothing; nodes
	// send that token themselves (Auth.PeerToken).
	ClassPeer
)

// String names the class as the error messages do.
func (c Class) String() string {
	switch c {
	case ClassOpen:
		return "open"
	case ClassLookup:
		return "lookup"
	case ClassWrite:
		return "write"
	case ClassAdmin:
		return "admin"
	case ClassPeer:
		return "peer"
	}
	return "unknown"
}

// methodClasses maps every RPC the server registers to its class. A
// method missing here (a service added later) needs the admin token:
// refusing is the safe default.
var methodClasses = map[string]Class{
	pb.InferenceCache_LookupRoute_FullMethodName:        ClassLookup,
	pb.InferenceCache_GetCachePolicy_FullMethodName:     ClassLookup,
	pb.InferenceCache_ReportPickerLoad_FullMethodName:   ClassLookup,
	pb.InferenceCache_SharePicks_FullMethodName:         ClassLookup,
	pb.InferenceCache_Ingest_FullMethodName:             ClassWrite,
	pb.InferenceCache_IngestStream_FullMethodName:       ClassWrite,
	pb.InferenceCache_ReportReplicaStats_FullMethodName: ClassWrite,
	pb.InferenceCache_SetCachePolicy_FullMethodName:     ClassWrite,
	forwardpb.Forward_Apply_FullMethodName:              ClassPeer,
	forwardpb.Forward_Restore_FullMethodName:            ClassPeer,
	forwardpb.Forward_ShareLoad_FullMethodName:          ClassPeer,
}

// MethodClass returns the class of a full gRPC method name
// ("/package.Service/Method").
func MethodClass(fullMethod string) Class {
	if c, ok := methodClasses[fullMethod]; ok {
		return c
	}
	switch {
	case strings.HasPrefix(fullMethod, "/"+healthpb.Health_ServiceDesc.ServiceName+"/"),
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1.ServerReflection/"),
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1alpha.ServerReflection/"):
		return ClassOpen
	case strings.HasPrefix(fullMethod, "/"+pb.Cluster_ServiceDesc.ServiceName+"/"):
		return ClassAdmin
	}
	return ClassAdmin
}

// TokenSource gives the bearer tokens currently accepted for one class.
// *tlsconfig.SecretFile implements it (reloaded when its file changes).
type TokenSource interface {
	// Secrets returns the accepted tokens; none = the class is open.
	Secrets() [][]byte
}

// AuthConfig holds the token of each class. Each class is independent: a
// nil source (or one with no token) leaves its class open even when other
// classes have tokens (an admin token alone protects only admin calls).
type AuthConfig struct {
	// Write is required by ClassWrite RPCs.
	Write TokenSource
	// Admin is required by ClassAdmin RPCs and accepted for every class.
	Admin TokenSource
	// Lookup, when set, is required by ClassLookup RPCs (the write and
	// admin tokens are accepted too); nil leaves lookups open to the
	// gateway network.
	Lookup TokenSource
}

// Auth checks `authorization: Bearer <token>` metadata per RPC class with
// constant-time comparison. A missing or unknown token is UNAUTHENTICATED;
// a valid token of a lesser class is PERMISSION_DENIED. Tokens appear in no
// error and no log. The admin token is accepted for every class and the
// write token for lookups too, so one credential serves an operator.
type Auth struct {
	cfg AuthConfig
}

// NewAuth returns the checker of cfg.
func NewAuth(cfg AuthConfig) *Auth { return &Auth{cfg: cfg} }

func tokens(s TokenSource) [][]byte {
	if s == nil {
		return nil
	}
	return s.Secrets()
}

// Enabled reports whether any class needs a token.
func (a *Auth) Enabled() bool {
	return len(tokens(a.cfg.Write)) > 0 || len(tokens(a.cfg.Admin)) > 0 || len(tokens(a.cfg.Lookup)) > 0
}

// PeerToken is the token a node sends on forwarding calls to its peers
// (the admin token if configured, else the write token, else ""): what
// ClassPeer requires.
func (a *Auth) PeerToken() string {
	for _, s := range []TokenSource{a.cfg.Admin, a.cfg.Write} {
		if t := tokens(s); len(t) > 0 {
			return string(t[0])
		}
	}
	return ""
}

// matchAny compares got with every token of s in constant time (per
// token, and without stopping at the first match).
func matchAny(got []byte, s TokenSource) bool {
	ok := 0
	for _, t := range tokens(s) {
		ok |= subtle.ConstantTimeCompare(got, t)
	}
	return ok == 1
}

// Check returns nil when the metadata of ctx may call a method of class c.
func (a *Auth) Check(ctx context.Context, c Class) error {
	var need []TokenSource // any of these; need[0] decides "open"
	switch c {
	case ClassOpen:
		return nil
	case ClassLookup:
		need = []TokenSource{a.cfg.Lookup, a.cfg.Write, a.cfg.Admin}
	case ClassWrite:
		need = []TokenSource{a.cfg.Write, a.cfg.Admin}
	case ClassAdmin:
		need = []TokenSource{a.cfg.Admin}
	case ClassPeer:
		if len(tokens(a.cfg.Admin)) > 0 {
			need = []TokenSource{a.cfg.Admin}
		} else {
			need = []TokenSource{a.cfg.Write}
		}
	}
	if len(tokens(need[0])) == 0 {
		return nil // the class has no token of its own: open
	}
	got, ok := bearer(ctx)
	if !ok {
		return status.Errorf(codes.Unauthenticated, "this call needs the %s token: send metadata \"authorization: Bearer <token>\"", c)
	}
	for _, s := range need {
		if matchAny(got, s) {
			return nil
		}
	}
	// A known token of another class: permission, not identity.
	for _, s := range []TokenSource{a.cfg.Lookup, a.cfg.Write, a.cfg.Admin} {
		if matchAny(got, s) {
			return status.Errorf(codes.PermissionDenied, "the token given does not grant %s calls", c)
		}
	}
	return status.Errorf(codes.Unauthenticated, "invalid bearer token for a %s call", c)
}

// bearer extracts the token of the authorization metadata.
func bearer(ctx context.Context) ([]byte, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil, false
	}
	for _, v := range md.Get("authorization") {
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			if t := strings.TrimSpace(v[7:]); t != "" {
				return []byte(t), true
			}
		}
	}
	return nil, false
}

// UnaryInterceptor checks the token before the handler runs.
func (a *Auth) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := a.Check(ctx, MethodClass(info.FullMethod)); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamInterceptor checks the token before the stream handler runs.
func (a *Auth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := a.Check(ss.Context(), MethodClass(info.FullMethod)); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// ServerOptions are the interceptors of a, for ServerConfig.Options.
func (a *Auth) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.UnaryInterceptor()), grpc.ChainStreamInterceptor(a.StreamInterceptor())}
}
