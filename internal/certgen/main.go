// Command certgen writes a throwaway PKI for tests and local TLS trials
// (`make certs`): a CA, a node certificate (server + client auth for
// localhost, 127.0.0.1, ::1, server.inference-cache and any -name), a
// client certificate, an expired node certificate, and a second unrelated
// CA with a node certificate of its own, plus a gossip key. Never use
// these in production.
//
//	go run ./internal/certgen -out .certs [-name 10.0.0.1 -name node1.example]
package main

import (
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/inference-cache/inference-cache/tlsconfig/tlstest"
)

type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

func main() {
	out := flag.String("out", ".certs", "directory to write into (created 0700)")
	var extra names
	flag.Var(&extra, "name", "extra DNS name or IP address for the node certificate (repeatable)")
	flag.Parse()
	s, err := tlstest.WriteSet(*out, extra...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
	gk := filepath.Join(*out, "gossip.key")
	if err := os.WriteFile(gk, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
	for _, p := range []string{"write", "admin", "lookup"} {
		tok := make([]byte, 24)
		rand.Read(tok)
		if err := os.WriteFile(filepath.Join(*out, p+".token"), []byte(base64.RawURLEncoding.EncodeToString(tok)+"\n"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "certgen:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("certgen: throwaway PKI in %s (NOT for production)\n", s.Dir)
	fmt.Printf("  CA          %s\n  node        %s  %s\n  client      %s  %s\n  expired     %s\n  other CA    %s (signs %s)\n  gossip key  %s\n  tokens      %s/{write,admin,lookup}.token\n",
		s.CA, s.NodeCert, s.NodeKey, s.ClientCert, s.ClientKey, s.ExpiredCert, s.OtherCA, s.OtherCert, gk, s.Dir)
}
