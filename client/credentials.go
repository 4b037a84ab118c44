package client

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc/credentials"

	"github.com/inference-cache/inference-cache/tlsconfig"
)

// bearer is a credentials.PerRPCCredentials sending a bearer token.
type bearer struct{ get func() string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t := b.get()
	if t == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + t}, nil
}

// RequireTransportSecurity is false so a token can be used against a
// plaintext local cluster; in production pair tokens with TLS (Config.TLS),
// or the token crosses the network in clear text.
func (bearer) RequireTransportSecurity() bool { return false }

// BearerToken returns per-RPC credentials that send
// `authorization: Bearer <token>` on every call (Config.Credentials).
func BearerToken(token string) credentials.PerRPCCredentials {
	return bearer{func() string { return token }}
}

// BearerTokenFile is BearerToken with the first non-empty, non-comment
// line of path, re-read when the file changes (rotation without a
// restart). An unreadable or empty file is an error.
func BearerTokenFile(path string) (credentials.PerRPCCredentials, error) {
	s, err := tlsconfig.NewSecretFile(path, tlsconfig.Options{})
	if err != nil {
		return nil, err
	}
	return bearer{s.First}, nil
}

// TLSFiles returns a client TLS config (Config.TLS) that verifies servers
// against caFile ("" = the system roots) and, with certFile and keyFile,
// presents that client certificate for mutual TLS. serverName, when not
// empty, replaces the dialed host in the server-name check. The files are
// re-read when they change.
func TLSFiles(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	r, err := tlsconfig.NewReloader(tlsconfig.Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, tlsconfig.Options{})
	if err != nil {
		return nil, err
	}
	return r.ClientConfig(serverName), nil
}

// BearerTokenFunc is BearerToken with a token read on every call (for a
// token that rotates); an empty token sends no authorization metadata.
func BearerTokenFunc(get func() string) credentials.PerRPCCredentials {
	return bearer{get}
}
