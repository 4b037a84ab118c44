package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// closedAddr is a loopback address nothing listens on (a port just
// released).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// Every client command reports a cluster that is not there once, naming
// the addresses and the way to start one; a gRPC call that reaches an
// HTTP port says so instead of "http2: frame too large".
func TestClientCommands_UnreachableAndHTTPPortErrors(t *testing.T) {
	down := closedAddr(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("metrics")) }))
	defer web.Close()
	httpAddr := strings.TrimPrefix(web.URL, "http://")
	const refused = "nothing listens there (connection refused); is the cluster running? `make run` starts a local one on 127.0.0.1:7401,7411,7421"
	const httpPort = "the address answers HTTP/1.1, not gRPC: it is likely a node's HTTP port (--http-addr, metrics and /readyz) or a proxy's; use a node's --grpc-addr"
	for _, c := range []struct {
		args  []string
		stdin string
		addr  string
		want  string
	}{
		{[]string{"ingest"}, `[{"kind":"CLEARED","replica_id":"r"}]`, down, "no node answered at " + down + ": " + refused},
		{[]string{"stats"}, `[{"replica_id":"r"}]`, down, "no node answered at " + down + ": " + refused},
		{[]string{"policy", "get"}, "", down, "no node answered at " + down + ": " + refused},
		{[]string{"lookup", "--model", "m", "--tenant", "t", "--tokens", "1,2"}, "", down, "no node answered at " + down + ": " + refused},
		{[]string{"policy", "get"}, "", httpAddr, "no node answered at " + httpAddr + ": " + httpPort},
		{[]string{"health"}, "", down, "health " + down + ": " + refused},
		{[]string{"health"}, "", httpAddr, "health " + httpAddr + ": " + httpPort},
	} {
		// ingest, stats and health wait out --timeout for a node to become
		// ready before they report; a loopback refusal or an HTTP answer
		// takes milliseconds, so 1 s leaves them ample time to see it.
		args := append(append([]string{}, c.args...), "--addr", c.addr, "--timeout", "1s")
		out, err := runCLI(t, c.stdin, args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: err = %v\nwant        %s\n(output %q)", c.args, err, c.want, out)
		}
		if strings.Count(out+errString(err), "connection refused") > 1 {
			t.Errorf("%v repeats the error:\n%s%v", c.args, out, err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// health takes several --addr and --json like every client command; the
// exit status is an error unless every node is SERVING.
func TestHealth_SeveralAddrsAndJSON(t *testing.T) {
	a, b := closedAddr(t), closedAddr(t)
	out, err := runCLI(t, "", "health", "--addr", a, "--addr", b, "--json", "--timeout", "1s")
	if err == nil || err.Error() != "2 of 2 nodes not SERVING" {
		t.Fatalf("err = %v, want 2 of 2 nodes not SERVING", err)
	}
	var rs []healthResult
	if jerr := json.Unmarshal([]byte(out), &rs); jerr != nil {
		t.Fatalf("--json output %q: %v", out, jerr)
	}
	if len(rs) != 2 || rs[0].Addr != a || rs[1].Addr != b || rs[0].Status != "UNREACHABLE" || !strings.Contains(rs[1].Error, "connection refused") {
		t.Fatalf("--json results %+v", rs)
	}
}
