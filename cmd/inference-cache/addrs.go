package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	gresolver "google.golang.org/grpc/resolver"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// How each client command uses its --addr list, for the flag's help. The
// SDK spreads calls round robin from its second address, so a command
// that makes one call with several --addr goes to the second first.
const (
	addrTurn   = "with several, the call goes to the second first (round robin), then to the next while one is unavailable"
	addrLookup = "with several, the lookup goes to the second first (round robin) and, when that node fails, to one other"
	addrWrite  = "with several, the write goes to the second first (round robin) and moves to the next while nodes fail, retrying for up to 5 s"
	addrLeader = "with several, they are asked in turn (the second first, round robin) who leads; the command then goes to the leader"
	addrEach   = "every one is asked, in order, and gets its own row"
	addrTop    = "every one is polled, and every member they report"
	addrHealth = "every one is checked; the exit status is 0 only when all are SERVING"
)

// checkAddr refuses an --addr value no gRPC dial could use: one without a
// port (gRPC would dial :443) and a URL such as http://127.0.0.1:7401,
// whose scheme gRPC reads as a resolver name (then "too many colons").
// A resolver target (dns:///node1:7401, unix:///path) passes.
func checkAddr(a string) error {
	if scheme, _, ok := strings.Cut(a, "://"); ok {
		if gresolver.Get(scheme) != nil {
			return nil
		}
		want := "HOST:PORT"
		if u, err := url.Parse(a); err == nil && u.Host != "" {
			want = u.Host
			if u.Port() == "" {
				want = net.JoinHostPort(u.Hostname(), "7401")
			}
		}
		return fmt.Errorf("--addr %q: want the node's --grpc-addr as HOST:PORT, without a scheme: --addr %s", a, want)
	}
	if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
		return fmt.Errorf("--addr %q: want HOST:PORT, e.g. 127.0.0.1:7401 (without a port gRPC would dial :443)", a)
	}
	return nil
}

// Texts of the failures explainAddr recognizes.
const (
	refusedText  = "nothing listens there (connection refused); is the cluster running? `make run` starts a local one on 127.0.0.1:7401,7411,7421"
	httpPortText = "the address answers HTTP/1.1, not gRPC: it is likely a node's HTTP port (--http-addr, metrics and /readyz) or a proxy's; use a node's --grpc-addr"
	notGRPCText  = "is not a gRPC port of inference-cache"
)

// failure classifies a call error by its text, the only thing the client
// and lookup's fail-open detail keep of it.
func failure(msg string) string {
	switch {
	case strings.Contains(msg, "frame too large"):
		return "http"
	case strings.Contains(msg, "connection refused"):
		return "refused"
	case strings.Contains(msg, "server preface"):
		return "notgrpc" // the peer closed the connection at the HTTP/2 handshake
	case strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "broken pipe"):
		return "reset" // the same, seen while gRPC still wrote its preface; or a node that died mid-call
	}
	return ""
}

// worded reports whether msg holds an explanation already (a command
// that words each address's failure itself, as health does).
func worded(msg string) bool {
	return strings.Contains(msg, refusedText) || strings.Contains(msg, httpPortText) || strings.Contains(msg, notGRPCText) ||
		strings.Contains(msg, tlsNeededText) || strings.Contains(msg, tlsClientText)
}

// explainedErr is a client command's error already put in words.
type explainedErr struct{ msg string }

func (e *explainedErr) Error() string { return e.msg }

// explain rewrites a client command's error that says no server was
// reached (connection refused, an HTTP port, a Raft or gossip port) into
// one line naming the --addr list, what happened at each address and what
// to do. Other errors pass unchanged.
func (c *clientFlags) explain(ctx context.Context, err error) error {
	var done *explainedErr
	if err == nil || errors.As(err, &done) || worded(err.Error()) {
		return err
	}
	all := strings.Join(c.addrs, ", ")
	if cause, _ := callCause(err); cause != "" {
		return &explainedErr{fmt.Sprintf("the cluster at %s refused the call: %s (%v)", all, cause, err)}
	}
	if failure(err.Error()) == "" {
		return err
	}
	if len(c.addrs) == 1 {
		return &explainedErr{fmt.Sprintf("no node answered at %s: %s", all, c.explainAddr(ctx, c.addrs[0], err))}
	}
	// The error is the last node's; ask each again for its own reason.
	whys := make([]string, len(c.addrs))
	same := true
	for i, a := range c.addrs {
		whys[i] = "it answers now"
		if _, perr := c.status(ctx, a); perr != nil {
			whys[i] = c.explainAddr(ctx, a, perr)
		}
		same = same && whys[i] == whys[0]
	}
	if same {
		return &explainedErr{fmt.Sprintf("no node answered at %s: %s", all, whys[0])}
	}
	for i, a := range c.addrs {
		whys[i] = a + ": " + whys[i]
	}
	return &explainedErr{fmt.Sprintf("no node answered at %s: %s", all, strings.Join(whys, "; "))}
}

// explainAddr is err, a call to addr that failed, in words a person can
// act on; an error it does not recognize is returned as is.
func (c *clientFlags) explainAddr(ctx context.Context, addr string, err error) string {
	if cause, _ := callCause(err); cause != "" {
		return cause + " (" + err.Error() + ")"
	}
	switch failure(err.Error()) {
	case "http":
		return httpPortText
	case "refused":
		return refusedText
	case "notgrpc":
		return c.notGRPC(ctx, addr)
	case "reset":
		// A port that closes every connection resets the next call
		// too; a node that died mid-call is gone or back.
		_, again := c.status(ctx, addr)
		if again == nil {
			return err.Error()
		}
		if k := failure(again.Error()); k == "notgrpc" || k == "reset" {
			return c.notGRPC(ctx, addr)
		}
		return c.explainAddr(ctx, addr, again)
	}
	return err.Error()
}

// notGRPC says what addr, a port that closes gRPC connections at the
// handshake, likely is. A node's Raft and gossip ports do that (they read
// their own protocols); by the project's layout they are its gRPC port + 1
// and + 2, so the ports below addr are asked for Status: a node there
// whose Raft port is addr's (or addr's − 1) names what addr is and the
// address to use.
func (c *clientFlags) notGRPC(ctx context.Context, addr string) string {
	if cause := c.security.probeCause(ctx, addr); cause != "" {
		return cause
	}
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	for below := 1; below <= 2 && err == nil && perr == nil && port-below > 0; below++ {
		cand := net.JoinHostPort(host, strconv.Itoa(port-below))
		st, err := c.status(ctx, cand)
		if err != nil {
			continue
		}
		for _, m := range st.Members {
			if _, mp, err := net.SplitHostPort(m.RaftAddress); err != nil || m.Id != st.NodeId || mp != strconv.Itoa(port-below+1) {
				continue
			}
			if below == 1 {
				return fmt.Sprintf("it %s but the Raft port of %s (its --raft-addr); use the node's --grpc-addr, e.g. %s", notGRPCText, printable(st.NodeId), cand)
			}
			return fmt.Sprintf("it %s; it looks like the gossip port of %s (whose Raft port is %s); use the node's --grpc-addr, e.g. %s", notGRPCText, printable(st.NodeId), m.RaftAddress, cand)
		}
	}
	return fmt.Sprintf("it %s: it accepts connections but closes them at gRPC's handshake, as a node's Raft and gossip ports do; use the node's --grpc-addr (%s by default; `status` lists each member's)", notGRPCText, defaultGRPCAddr)
}

// status asks the node at addr alone for its Status, within a second.
func (c *clientFlags) status(ctx context.Context, addr string) (*pb.StatusResponse, error) {
	one, err := c.dialAddrs([]string{addr})
	if err != nil {
		return nil, err
	}
	defer one.Close()
	ctx, cancel := context.WithTimeout(ctx, min(c.timeout, time.Second))
	defer cancel()
	var st *pb.StatusResponse
	err = one.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
		var err error
		st, err = cl.Status(ctx, &pb.StatusRequest{})
		return err
	})
	return st, err
}
