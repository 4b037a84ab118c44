package main

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/policy"
)

// adjacentListeners listens on n consecutive loopback ports.
func adjacentListeners(t *testing.T, n int) []net.Listener {
	t.Helper()
	for try := 0; try < 100; try++ {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls := []net.Listener{first}
		port := first.Addr().(*net.TCPAddr).Port
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) == n {
			for _, l := range ls {
				t.Cleanup(func() { l.Close() })
			}
			return ls
		}
		for _, l := range ls {
			l.Close()
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return nil
}

// statusServer answers Cluster.Status as node id whose Raft address is
// raftAddr.
type statusServer struct {
	pb.UnimplementedClusterServer
	id, raftAddr string
}

func (s *statusServer) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{NodeId: s.id, State: "Leader", Members: []*pb.Member{
		{Id: "other", RaftAddress: "10.9.9.9:1"}, {Id: s.id, RaftAddress: s.raftAddr}}}, nil
}

func (s *statusServer) Digest(context.Context, *pb.DigestRequest) (*pb.DigestResponse, error) {
	return &pb.DigestResponse{}, nil
}

// serveStatus serves statusServer s on l.
func serveStatus(t *testing.T, l net.Listener, s *statusServer) {
	g := grpc.NewServer()
	pb.RegisterClusterServer(g, s)
	go g.Serve(l)
	t.Cleanup(g.Stop)
}

// hangUp accepts connections on l, reads what the client sends first and
// closes them, as a node's gossip port does with bytes it cannot read.
func hangUp(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:])
		}()
	}
}

// raftStream is a raft.StreamLayer on a listener the test chose.
type raftStream struct{ net.Listener }

func (s raftStream) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(a), timeout)
}

// An --addr naming a node's Raft port (a real hashicorp/raft transport)
// or its gossip port is named as such, with the node's gRPC address to use
// instead (found at the ports below it, by the project's layout), and not
// as "error reading server preface"; a port that closes gRPC's handshake
// with no node below it says what it likely is. Lookups too, where the SDK
// fails open: the command exits 1 and does not say "failing open".
func TestClientCommands_RaftAndGossipPortsNamed(t *testing.T) {
	ls := adjacentListeners(t, 3) // gRPC, Raft, gossip
	grpcAddr, raftAddr, gossipAddr := ls[0].Addr().String(), ls[1].Addr().String(), ls[2].Addr().String()
	serveStatus(t, ls[0], &statusServer{id: "node7", raftAddr: raftAddr})
	tr := raft.NewNetworkTransport(raftStream{ls[1]}, 1, time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	go hangUp(ls[2])
	lone := adjacentListeners(t, 1)[0]
	go hangUp(lone)
	loneAddr := lone.Addr().String()

	raftWhy := "it is not a gRPC port of inference-cache but the Raft port of node7 (its --raft-addr); use the node's --grpc-addr, e.g. " + grpcAddr
	gossipWhy := "it is not a gRPC port of inference-cache; it looks like the gossip port of node7 (whose Raft port is " + raftAddr + "); use the node's --grpc-addr, e.g. " + grpcAddr
	loneWhy := "it is not a gRPC port of inference-cache: it accepts connections but closes them at gRPC's handshake, as a node's Raft and gossip ports do; use the node's --grpc-addr (127.0.0.1:7401 by default; `status` lists each member's)"
	lookup := []string{"lookup", "--model", "m", "--tenant", "t", "--tokens", "1,2"}
	for _, c := range []struct {
		args  []string
		addrs []string
		want  string
	}{
		{[]string{"policy", "get"}, []string{raftAddr}, "no node answered at " + raftAddr + ": " + raftWhy},
		{lookup, []string{raftAddr}, "no node answered at " + raftAddr + ": " + raftWhy},
		{[]string{"policy", "get"}, []string{gossipAddr}, "no node answered at " + gossipAddr + ": " + gossipWhy},
		{lookup, []string{loneAddr}, "no node answered at " + loneAddr + ": " + loneWhy},
		{[]string{"health"}, []string{gossipAddr}, "health " + gossipAddr + ": " + gossipWhy},
		{[]string{"policy", "get"}, []string{raftAddr, gossipAddr}, "no node answered at " + raftAddr + ", " + gossipAddr + ": " +
			raftAddr + ": " + raftWhy + "; " + gossipAddr + ": " + gossipWhy},
	} {
		args := append([]string{}, c.args...)
		for _, a := range c.addrs {
			args = append(args, "--addr", a)
		}
		out, err := runCLI(t, "", append(args, "--timeout", "3s")...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v %v: err = %v\nwant        %s\n(output %q)", c.args, c.addrs, err, c.want, out)
		}
	}
	// status words each row, and its error says only that none answered.
	out, err := runCLI(t, "", "status", "--addr", raftAddr, "--timeout", "3s")
	if !strings.Contains(out, raftWhy) || err == nil || err.Error() != "no node answered Status at "+raftAddr+" (the output above says why)" {
		t.Errorf("status: %v\n%s", err, out)
	}
}

// A lookup no node answers in time exits 1 naming the timeout, not the
// SDK's "failing open" (a gateway's behaviour, not the CLI's).
func TestLookupCmd_TimeoutIsAnErrorWithoutFailingOpen(t *testing.T) {
	l := adjacentListeners(t, 1)[0]
	go func() { // accept and never answer
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	addr := l.Addr().String()
	_, err := runCLI(t, "", "lookup", "--model", "m", "--tenant", "t", "--tokens", "1", "--addr", addr, "--timeout", "300ms")
	want := "no node answered LookupRoute at " + addr + " within --timeout 300ms: DeadlineExceeded: "
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "failing open") {
		t.Fatalf("err = %v\nwant one starting %q, without \"failing open\"", err, want)
	}
}

// A URL as --addr is refused before any call with the address to give
// instead; gRPC resolver targets pass.
func TestClientFlags_URLRefusedWithTheAddressToUse(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:7401":          `--addr "http://127.0.0.1:7401": want the node's --grpc-addr as HOST:PORT, without a scheme: --addr 127.0.0.1:7401`,
		"https://node1:7411/":            `--addr "https://node1:7411/": want the node's --grpc-addr as HOST:PORT, without a scheme: --addr node1:7411`,
		"http://127.0.0.1:7404/metrics":  `--addr "http://127.0.0.1:7404/metrics": want the node's --grpc-addr as HOST:PORT, without a scheme: --addr 127.0.0.1:7404`,
		"http://node1":                   `--addr "http://node1": want the node's --grpc-addr as HOST:PORT, without a scheme: --addr node1:7401`,
		"dns:///node1:7401":              "",
		"unix:///run/inference-cache.sk": "",
	} {
		err := (&clientFlags{addrs: []string{in}, timeout: time.Second}).validate()
		if got := errString(err); got != want {
			t.Errorf("--addr %q: %q\nwant %q", in, got, want)
		}
	}
}

// The --addr help says what each command does with several addresses,
// and that is what happens: a lookup and a policy get go to the second
// address first (the SDK's round robin), status asks every one.
func TestClientCommands_AddrHelpSaysWhatHappens(t *testing.T) {
	usage := func(args ...string) string {
		cmd, _, err := newRootCmd().Find(args)
		if err != nil {
			t.Fatal(err)
		}
		return cmd.Flags().Lookup("addr").Usage
	}
	first := startLookupServer(t, &lookupServer{resp: &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, ServedBy: "first"}})
	second := startLookupServer(t, &lookupServer{resp: &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, ServedBy: "second"}})
	out, err := runCLI(t, "", "lookup", "--model", "m", "--tenant", "t", "--tokens", "1", "--addr", first, "--addr", second)
	if u := usage("lookup"); err != nil || !strings.Contains(out, "served by  second ") || !strings.Contains(u, "the lookup goes to the second first") {
		t.Errorf("lookup: %v\n%s\nhelp: %s", err, out, u)
	}

	v1, v2 := api.PolicyToPB(policy.Default()), api.PolicyToPB(policy.Default())
	v1.Version, v2.Version = 1, 2
	a, b := startGRPC(t, &policyServer{cur: v1}), startGRPC(t, &policyServer{cur: v2})
	out, err = runCLI(t, "", "policy", "get", "--addr", a, "--addr", b)
	if u := usage("policy", "get"); err != nil || !strings.HasPrefix(out, "# version 2\n") || !strings.Contains(u, "the call goes to the second first") {
		t.Errorf("policy get: %v\n%s\nhelp: %s", err, out, u)
	}

	ls := adjacentListeners(t, 2)
	serveStatus(t, ls[0], &statusServer{id: "n1", raftAddr: "127.0.0.1:1"})
	serveStatus(t, ls[1], &statusServer{id: "n2", raftAddr: "127.0.0.1:2"})
	out, err = runCLI(t, "", "status", "--addr", ls[0].Addr().String(), "--addr", ls[1].Addr().String())
	if u := usage("status"); err != nil || len(fieldsOf(out, ls[0].Addr().String())) < 2 || len(fieldsOf(out, ls[1].Addr().String())) < 2 || !strings.Contains(u, "every one is asked") {
		t.Errorf("status: %v\n%s\nhelp: %s", err, out, u)
	}

	// No command claims the old "first that answers".
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("addr"); f != nil && strings.Contains(f.Usage, "first that answers") {
			t.Errorf("%s --addr: %q", c.CommandPath(), f.Usage)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}

// The picker and the proxy refuse, before serving, an --addr that is a
// node's Raft or gossip port, in the client commands' words; an address
// where nothing listens yet passes (the cluster may start later; picks
// are by load until then).
func TestGatewayCommands_RefuseRaftAndGossipPorts(t *testing.T) {
	ls := adjacentListeners(t, 3) // gRPC, Raft, gossip
	grpcAddr, raftAddr, gossipAddr := ls[0].Addr().String(), ls[1].Addr().String(), ls[2].Addr().String()
	serveStatus(t, ls[0], &statusServer{id: "node7", raftAddr: raftAddr})
	tr := raft.NewNetworkTransport(raftStream{ls[1]}, 1, time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	go hangUp(ls[2])

	raftWhy := "--addr " + raftAddr + ": it is not a gRPC port of inference-cache but the Raft port of node7 (its --raft-addr); use the node's --grpc-addr, e.g. " + grpcAddr
	gossipWhy := "--addr " + gossipAddr + ": it is not a gRPC port of inference-cache; it looks like the gossip port of node7 (whose Raft port is " + raftAddr + "); use the node's --grpc-addr, e.g. " + grpcAddr
	picker := []string{"picker", "--listen", "127.0.0.1:0", "--health-listen", "", "--metrics-listen", "", "--endpoint", "127.0.0.1:1=a"}
	proxy := []string{"proxy", "--listen", "127.0.0.1:0", "--backend", "a=http://127.0.0.1:1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(append([]string{}, picker...), "--addr", grpcAddr, "--addr", raftAddr), raftWhy},
		{append(append([]string{}, picker...), "--addr", gossipAddr), gossipWhy},
		{append(append([]string{}, proxy...), "--addr", raftAddr), raftWhy},
	} {
		_, err := runCLI(t, "", c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v:\n got  %v\n want %s", c.args, err, c.want)
		}
	}

	closed := freeAddr(t)
	g := &gatewayFlags{addrs: []string{grpcAddr, closed}}
	if err := g.refuseNotGRPC(context.Background()); err != nil {
		t.Errorf("a node's gRPC port and a closed port: %v, want accepted", err)
	}
}

// freeAddr is a loopback address where nothing listens.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}
