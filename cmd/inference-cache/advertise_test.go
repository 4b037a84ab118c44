package main

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

type fakeResolver struct {
	addrs    map[string][]net.IPAddr
	failures int // lookups that fail before the first success
	calls    int
}

func (f *fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	f.calls++
	if f.calls <= f.failures {
		return nil, errors.New("no such host")
	}
	if a, ok := f.addrs[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func ipa(s ...string) []net.IPAddr {
	var out []net.IPAddr
	for _, x := range s {
		out = append(out, net.IPAddr{IP: net.ParseIP(x)})
	}
	return out
}

func TestAdvertiseAddrs_SpecificBindsAdvertisedAsBound(t *testing.T) {
	got, err := advertiseAddrs(context.Background(), "", "127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403", &fakeResolver{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := advertised{grpc: "127.0.0.1:7401", raft: "127.0.0.1:7402", gossip: "127.0.0.1:7403"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestAdvertiseAddrs_HostNameForRaftAndGRPC_IPForGossip(t *testing.T) {
	r := &fakeResolver{addrs: map[string][]net.IPAddr{"ic-0.ic-peers": ipa("fd00::5", "10.1.2.3")}}
	got, err := advertiseAddrs(context.Background(), "ic-0.ic-peers", "[::]:7401", "0.0.0.0:7402", "0.0.0.0:7403", r, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Raft and gRPC keep the name (re-resolved on every dial, so they
	// survive a new pod IP); memberlist needs an IP, IPv4 preferred.
	want := advertised{grpc: "ic-0.ic-peers:7401", raft: "ic-0.ic-peers:7402", gossip: "10.1.2.3:7403"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestAdvertiseAddrs_IPNeedsNoLookup(t *testing.T) {
	r := &fakeResolver{}
	got, err := advertiseAddrs(context.Background(), "172.30.57.11", "0.0.0.0:7401", "0.0.0.0:7402", "0.0.0.0:7403", r, 0)
	if err != nil || got.gossip != "172.30.57.11:7403" || got.raft != "172.30.57.11:7402" || r.calls != 0 {
		t.Fatalf("got %+v, %v, %d lookups", got, err, r.calls)
	}
}

func TestAdvertiseAddrs_UnspecifiedBindDefaultsToHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name")
	}
	r := &fakeResolver{addrs: map[string][]net.IPAddr{host: ipa("10.9.8.7")}}
	got, err := advertiseAddrs(context.Background(), "", "0.0.0.0:7401", "0.0.0.0:7402", "127.0.0.1:7403", r, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := advertised{grpc: net.JoinHostPort(host, "7401"), raft: net.JoinHostPort(host, "7402"), gossip: "127.0.0.1:7403"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestAdvertiseAddrs_WaitsForDNS(t *testing.T) {
	r := &fakeResolver{addrs: map[string][]net.IPAddr{"late": ipa("10.0.0.9")}, failures: 2}
	got, err := advertiseAddrs(context.Background(), "late", "0.0.0.0:1", "0.0.0.0:2", "0.0.0.0:3", r, time.Minute)
	if err != nil || got.gossip != "10.0.0.9:3" || r.calls != 3 {
		t.Fatalf("got %+v, %v after %d lookups", got, err, r.calls)
	}
}

func TestAdvertiseAddrs_UnresolvableNameIsAnError(t *testing.T) {
	_, err := advertiseAddrs(context.Background(), "nowhere", "0.0.0.0:1", "0.0.0.0:2", "0.0.0.0:3", &fakeResolver{}, 0)
	if err == nil || !strings.Contains(err.Error(), "--advertise-addr \"nowhere\"") {
		t.Fatalf("err = %v, want one naming --advertise-addr", err)
	}
	if _, err := advertiseAddrs(context.Background(), "", "no-port", "0.0.0.0:2", "0.0.0.0:3", &fakeResolver{}, 0); err == nil || !strings.Contains(err.Error(), "--grpc-addr") {
		t.Fatalf("err = %v, want one naming --grpc-addr", err)
	}
}
