package api

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/tlsconfig"
	"github.com/inference-cache/inference-cache/tlsconfig/tlstest"
)

// TestGRPCAPI_MutualTLSHappyPathAndRefusals serves the InferenceCache API
// over mutual TLS (as `server --tls-client-auth require-and-verify` does)
// and calls it with good and bad client credentials.
func TestGRPCAPI_MutualTLSHappyPathAndRefusals(t *testing.T) {
	s, err := tlstest.WriteSet(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := tlsconfig.NewReloader(tlsconfig.Files{CertFile: s.NodeCert, KeyFile: s.NodeKey, CAFile: s.CA}, tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := r.ServerConfig(tlsconfig.ClientAuthRequireAndVerify)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvCfg)))
	pb.RegisterInferenceCacheServer(gs, newSvc(&fakeNode{lookup: match}, nil))
	go gs.Serve(lis)
	defer gs.Stop()

	call := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewInferenceCacheClient(cc).GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
		return err
	}
	client := func(cert, key, ca string) credentials.TransportCredentials {
		r, err := tlsconfig.NewReloader(tlsconfig.Files{CertFile: cert, KeyFile: key, CAFile: ca}, tlsconfig.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(r.ClientConfig(""))
	}
	if err := call(client(s.ClientCert, s.ClientKey, s.CA)); err != nil {
		t.Fatalf("client certificate of the CA: %v", err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"client cert of another CA": client(s.OtherCert, s.OtherKey, s.CA),
		"expired client cert":       client(s.ExpiredCert, s.ExpiredKey, s.CA),
		"no client cert":            client("", "", s.CA),
		"client trusts another CA":  client(s.ClientCert, s.ClientKey, s.OtherCA),
		"plaintext client":          insecure.NewCredentials(),
	} {
		if err := call(creds); err == nil {
			t.Errorf("%s: call accepted", name)
		}
	}
}
