package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"
)

// advertiseResolveWait bounds how long the server waits at start for its
// advertised host name to resolve. In Kubernetes a pod's own name under the
// headless Service appears in DNS a moment after the pod starts.
const advertiseResolveWait = 2 * time.Minute

// advertised are the addresses a server gives its peers: Raft (stored in
// the Raft configuration, dialled by name on every connect, so a host name
// survives IP changes), gossip (memberlist needs an IP) and gRPC (the
// leader's, dialled by followers that forward writes).
type advertised struct {
	raft, gossip, grpc string
}

// resolver looks up a host's addresses; net.DefaultResolver in production.
type resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// advertiseAddrs derives the advertised addresses. host is --advertise-addr
// (a host name or IP, no port); the ports are those of the bind addresses
// (grpcAddr is the gRPC listener's actual address). An address whose bind
// host is specific and host == "" is advertised as bound; one bound to
// 0.0.0.0, :: or "" is advertised under host, or this machine's host name
// when host is "" (a container's host name resolves to its own IP).
// The gossip address is resolved to an IP, retrying for up to wait.
func advertiseAddrs(ctx context.Context, host, grpcAddr, raftAddr, gossipAddr string, r resolver, wait time.Duration) (advertised, error) {
	var out advertised
	for _, a := range []struct {
		flag, bind string
		dst        *string
	}{{"--grpc-addr", grpcAddr, &out.grpc}, {"--raft-addr", raftAddr, &out.raft}, {"--gossip-addr", gossipAddr, &out.gossip}} {
		h, port, err := net.SplitHostPort(a.bind)
		if err != nil {
			return advertised{}, fmt.Errorf("%s %q: %w", a.flag, a.bind, err)
		}
		switch {
		case host != "":
			h = host
		case unspecifiedHost(h):
			if h, err = os.Hostname(); err != nil || h == "" {
				return advertised{}, fmt.Errorf("%s %q binds every interface and the host name is unknown (%v): set --advertise-addr", a.flag, a.bind, err)
			}
		}
		*a.dst = net.JoinHostPort(h, port)
	}
	gh, gp, _ := net.SplitHostPort(out.gossip)
	if net.ParseIP(gh) != nil {
		return out, nil
	}
	ip, err := resolveIP(ctx, r, gh, wait)
	if err != nil {
		return advertised{}, fmt.Errorf("--advertise-addr %q: %w", gh, err)
	}
	out.gossip = net.JoinHostPort(ip, gp)
	return out, nil
}

func unspecifiedHost(h string) bool {
	ip := net.ParseIP(h)
	return h == "" || (ip != nil && ip.IsUnspecified())
}

// resolveIP returns host's first IPv4 address (else its first address),
// retrying every second until wait has passed.
func resolveIP(ctx context.Context, r resolver, host string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		addrs, err := r.LookupIPAddr(ctx, host)
		if err == nil && len(addrs) > 0 {
			for _, a := range addrs {
				if a.IP.To4() != nil {
					return a.IP.String(), nil
				}
			}
			return addrs[0].IP.String(), nil
		}
		if err == nil {
			err = fmt.Errorf("no addresses")
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("resolve %s for %s: %w", host, wait, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("resolve %s: %w", host, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
