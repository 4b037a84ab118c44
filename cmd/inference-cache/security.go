package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inference-cache/inference-cache/api"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/tlsconfig"
)

// Token environment variables: a token may be given directly through the
// environment instead of a file (never as a flag, which `ps` would show).
// A --*-token-file flag wins over its variable.
const (
	envWriteToken  = EnvPrefix + "WRITE_TOKEN"
	envAdminToken  = EnvPrefix + "ADMIN_TOKEN"
	envLookupToken = EnvPrefix + "LOOKUP_TOKEN"
	envToken       = EnvPrefix + "TOKEN" // client subcommands
)

// serverSecurityFlags are the TLS, gossip-encryption and token flags of
// `inference-cache server` (contract §9.7). All are off by default (the local
// quick start); docs/security.md describes a production setup.
type serverSecurityFlags struct {
	tlsCert, tlsKey, tlsCA, tlsClientAuth, tlsServerName string
	raftTLS                                              bool
	gossipKeyFile                                        string
	writeTokenFile, adminTokenFile, lookupTokenFile      string
}

func (s *serverSecurityFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.tlsCert, "tls-cert", "", "PEM certificate of this node: serves the gRPC API over TLS and is presented to peers (reloaded when the file changes); empty = plaintext gRPC")
	f.StringVar(&s.tlsKey, "tls-key", "", "PEM private key of --tls-cert (reloaded when the file changes)")
	f.StringVar(&s.tlsCA, "tls-ca", "", "PEM CA bundle that verifies client certificates (with --tls-client-auth) and peers' certificates (forwarding, --raft-tls); reloaded when the file changes")
	f.StringVar(&s.tlsClientAuth, "tls-client-auth", "none", "client certificates on the gRPC API: none, request (verified when sent) or require-and-verify (mutual TLS; gateways and the CLI then need --tls-cert too)")
	f.StringVar(&s.tlsServerName, "tls-server-name", "", "name peers' certificates must carry on node-to-node connections (forwarding, Raft) instead of the dialed host, e.g. server.inference-cache")
	f.BoolVar(&s.raftTLS, "raft-tls", false, "carry Raft over mutual TLS with --tls-cert, --tls-key and --tls-ca (every server of the cluster must agree)")
	f.StringVar(&s.gossipKeyFile, "gossip-key-file", "", "file of base64 memberlist keys (16, 24 or 32 bytes; first line encrypts, every line decrypts): encrypts and authenticates gossip; re-read on change (rotation without restart); empty = plaintext gossip")
	f.StringVar(&s.writeTokenFile, "write-token-file", "", "file of bearer tokens (one per line, reloaded on change) required by Ingest, IngestStream, ReportReplicaStats and SetCachePolicy; or set "+envWriteToken+"; empty = writes open")
	f.StringVar(&s.adminTokenFile, "admin-token-file", "", "file of bearer tokens required by the Cluster service (status, membership, snapshots, backup, restore) and node-to-node forwarding, accepted everywhere; or set "+envAdminToken+"; empty = admin open")
	f.StringVar(&s.lookupTokenFile, "lookup-token-file", "", "file of bearer tokens required by LookupRoute and GetCachePolicy (write and admin tokens are accepted too); or set "+envLookupToken+"; empty = lookups open to the gateway network")
	markPaths(f, "tls-cert", "tls-key", "tls-ca", "gossip-key-file", "write-token-file", "admin-token-file", "lookup-token-file")
}

// serverSecurity is what the flags build.
type serverSecurity struct {
	grpcOptions []grpc.ServerOption // TLS credentials
	auth        *api.Auth
	dial        []grpc.DialOption // forwarding to the leader
	raftTLS     *raftnode.RaftTLS
	gossipKeys  [][]byte
	gossipFile  *tlsconfig.GossipKeyFile // nil without --gossip-key-file
	summary     []any                    // for the start-up log line: modes, never secrets
}

func tokenSource(file, env string, log *slog.Logger) (api.TokenSource, string, error) {
	if file != "" {
		s, err := tlsconfig.NewSecretFile(file, tlsconfig.Options{Logger: log})
		if err != nil {
			return nil, "", err
		}
		return s, "file", nil
	}
	if v, ok := os.LookupEnv(env); ok && v != "" {
		if strings.TrimSpace(v) == "" {
			// StaticSecrets would trim it to no token, which leaves the
			// class open while the log says a token is set.
			return nil, "", fmt.Errorf("%s is set but holds only whitespace: unset it to leave this class open, or set a token", env)
		}
		return tlsconfig.StaticSecrets(v), "env", nil
	}
	return nil, "off", nil
}

func (s *serverSecurityFlags) build(log *slog.Logger) (*serverSecurity, error) {
	out := &serverSecurity{}
	auth, err := tlsconfig.ParseClientAuth(s.tlsClientAuth)
	if err != nil {
		return nil, fmt.Errorf("--tls-client-auth: %w", err)
	}
	var files tlsconfig.Files
	if s.tlsCert != "" || s.tlsKey != "" {
		if s.tlsCert == "" || s.tlsKey == "" {
			return nil, errors.New("--tls-cert and --tls-key go together")
		}
		files = tlsconfig.Files{CertFile: s.tlsCert, KeyFile: s.tlsKey, CAFile: s.tlsCA}
	} else if auth != tlsconfig.ClientAuthNone || s.raftTLS {
		return nil, errors.New("--tls-client-auth and --raft-tls need --tls-cert and --tls-key")
	}
	if (auth != tlsconfig.ClientAuthNone || s.raftTLS) && s.tlsCA == "" {
		return nil, errors.New("--tls-client-auth and --raft-tls need --tls-ca to verify peers with")
	}
	out.summary = append(out.summary, "tls", files.CertFile != "", "tls_client_auth", auth.String(), "raft_tls", s.raftTLS)
	if files.CertFile != "" {
		r, err := tlsconfig.NewReloader(files, tlsconfig.Options{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
		}
		srv, err := r.ServerConfig(auth)
		if err != nil {
			return nil, err
		}
		out.grpcOptions = append(out.grpcOptions, grpc.Creds(credentials.NewTLS(srv)))
		peer := r.ClientConfig(s.tlsServerName)
		out.dial = append(out.dial, grpc.WithTransportCredentials(credentials.NewTLS(peer)))
		if s.raftTLS {
			rs, err := r.ServerConfig(tlsconfig.ClientAuthRequireAndVerify)
			if err != nil {
				return nil, err
			}
			out.raftTLS = &raftnode.RaftTLS{Server: rs, Client: r.ClientConfig(s.tlsServerName)}
		}
	}
	if s.gossipKeyFile != "" {
		if out.gossipFile, err = tlsconfig.NewGossipKeyFile(s.gossipKeyFile, tlsconfig.Options{Logger: log}); err != nil {
			return nil, fmt.Errorf("--gossip-key-file: %w", err)
		}
		out.gossipKeys = out.gossipFile.Keys()
	}
	out.summary = append(out.summary, "gossip_encryption", len(out.gossipKeys) > 0)
	var cfg api.AuthConfig
	for _, t := range []struct {
		name, file, env string
		dst             *api.TokenSource
	}{
		{"write", s.writeTokenFile, envWriteToken, &cfg.Write},
		{"admin", s.adminTokenFile, envAdminToken, &cfg.Admin},
		{"lookup", s.lookupTokenFile, envLookupToken, &cfg.Lookup},
	} {
		src, how, err := tokenSource(t.file, t.env, log)
		if err != nil {
			return nil, fmt.Errorf("--%s-token-file: %w", t.name, err)
		}
		*t.dst = src
		out.summary = append(out.summary, t.name+"_token", how)
	}
	out.auth = api.NewAuth(cfg)
	if out.auth.Enabled() {
		out.dial = append(out.dial, grpc.WithPerRPCCredentials(client.BearerTokenFunc(out.auth.PeerToken)))
	}
	if len(out.dial) > 0 && files.CertFile == "" {
		// Tokens without TLS: forwarding stays plaintext.
		out.dial = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, out.dial...)
	}
	return out, nil
}

// clientSecurityFlags are the TLS and token flags of every client
// subcommand.
type clientSecurityFlags struct {
	tlsCA, tlsCert, tlsKey, tlsServerName, tokenFile string
}

func (s *clientSecurityFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.tlsCA, "tls-ca", "", "PEM CA bundle that verifies the servers; setting any --tls-* flag dials over TLS (empty CA = the system roots)")
	f.StringVar(&s.tlsCert, "tls-cert", "", "PEM client certificate for servers that require mutual TLS")
	f.StringVar(&s.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&s.tlsServerName, "tls-server-name", "", "name the server certificate must carry instead of the --addr host")
	f.StringVar(&s.tokenFile, "token-file", "", "file whose first line is the bearer token sent on every call (write, admin or lookup token as the command needs); or set "+envToken)
	markPaths(f, "tls-ca", "tls-cert", "tls-key", "token-file")
}

// dialsTLS reports whether the flags dial over TLS.
func (s *clientSecurityFlags) dialsTLS() bool {
	return s.tlsCA != "" || s.tlsCert != "" || s.tlsKey != "" || s.tlsServerName != ""
}

// apply adds TLS and token credentials to cfg.
func (s *clientSecurityFlags) apply(cfg *client.Config) error {
	if s.dialsTLS() {
		if (s.tlsCert == "") != (s.tlsKey == "") {
			return errors.New("--tls-cert and --tls-key go together")
		}
		t, err := client.TLSFiles(s.tlsCA, s.tlsCert, s.tlsKey, s.tlsServerName)
		if err != nil {
			return err
		}
		cfg.TLS = t
	}
	switch {
	case s.tokenFile != "":
		c, err := client.BearerTokenFile(s.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		cfg.Credentials = c
	case os.Getenv(envToken) != "":
		cfg.Credentials = client.BearerToken(os.Getenv(envToken))
	}
	return nil
}

// gossipKeyCheckInterval is how often the server looks at
// --gossip-key-file for a rotation.
const gossipKeyCheckInterval = tlsconfig.DefaultCheckInterval

// watchGossipKeys hands the keys of a changed --gossip-key-file to the
// node's memberlist keyring until ctx ends. A file that does not load, or
// keys the keyring refuses, leave the keys in force (logged).
func watchGossipKeys(ctx context.Context, f *tlsconfig.GossipKeyFile, node *raftnode.Node, log *slog.Logger) {
	t := time.NewTicker(gossipKeyCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys, changed := f.Reload()
		if !changed {
			continue
		}
		if err := node.SetGossipKeys(keys); err != nil {
			log.Warn("gossip keys not applied; the previous keys stay in force", "err", err)
			continue
		}
		log.Info("gossip keys applied", "keys", len(keys), "primary", tlsconfig.KeyFingerprint(keys[0]))
	}
}
