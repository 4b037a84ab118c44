package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortIsBelowEphemeralRangeAndBindable(t *testing.T) {
	lo := ephemeralLow()
	for i := 0; i < 20; i++ {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < lowest || p >= lo {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, lo)
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("picked port %d cannot be bound: %v", p, err)
		}
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			l.Close()
			t.Fatalf("picked port %d cannot be bound for UDP: %v", p, err)
		}
		u.Close()
		l.Close()
	}
}

func TestFreeRefusesABoundPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(l.Addr().(*net.TCPAddr).Port) {
		t.Fatal("a port with a live TCP listener was reported free")
	}
}

// A port probed free is released at once; the next pick must still not
// return it (one node's Raft and gossip ports once came out equal).
func TestPortNeverRepeatsInAProcess(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 2000; i++ {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice (pick %d)", p, i)
		}
		seen[p] = true
	}
}

func TestRangeIsFreeAndNotHandedOutAgain(t *testing.T) {
	// TestPortNeverRepeatsInAProcess hands out thousands of ports; with
	// -count > 1 no window of 24 would be left.
	given.Clear()
	b, err := Range(24)
	if err != nil {
		t.Fatal(err)
	}
	if b < lowest || b+24 >= ephemeralLow() {
		t.Fatalf("base %d: range outside [%d, %d)", b, lowest, ephemeralLow())
	}
	for p := b + 1; p <= b+24; p++ {
		if _, dup := given.Load(p); !dup {
			t.Fatalf("port %d of the range not recorded as handed out", p)
		}
	}
	b2, err := Range(24)
	if err != nil {
		t.Fatal(err)
	}
	if b2+24 >= b+1 && b2+1 <= b+24 {
		t.Fatalf("second range %d..%d overlaps the first %d..%d", b2+1, b2+24, b+1, b+24)
	}
}
