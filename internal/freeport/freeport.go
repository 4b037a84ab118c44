package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the bottom of the range picked from: above the well-known and
// commonly configured service ports.
const lowest = 20000

// defaultEphemeralLow is Linux's default bottom of
// net.ipv4.ip_local_port_range, used when /proc cannot be read.
const defaultEphemeralLow = 32768

// ephemeralLow reads the bottom of the kernel's ephemeral port range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralLow
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return defaultEphemeralLow
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= lowest+1000 {
		// A range reaching this low leaves nothing safe to pick from;
		// fall back to the default and accept the (retried) race.
		return defaultEphemeralLow
	}
	return lo
}

// given holds every port this process handed out: a port probed free is
// closed again at once, so without it two picks (say one node's Raft and
// gossip ports) could return the same port, which the kernel's own :0
// allocation never does in quick succession.
var given sync.Map // int → struct{}

// Port returns a loopback port in [20000, ephemeral range start) that was
// free for both TCP and UDP a moment ago and that this process has not
// handed out before. Errors when 100 random tries all found the port
// taken.
func Port() (int, error) {
	hi := ephemeralLow()
	for tries := 0; tries < 100; tries++ {
		p := lowest + rand.IntN(hi-lowest)
		if _, dup := given.LoadOrStore(p, struct{}{}); dup {
			continue
		}
		if free(p) {
			return p, nil
		}
	}
	return 0, errors.New("freeport: no free loopback port below the ephemeral range after 100 tries")
}

// Addr is Port as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// MustAddr is Addr for tests: it fails t when no port is found.
func MustAddr(t interface {
	Helper()
	Fatal(args ...any)
}) string {
	t.Helper()
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func free(p int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// Range returns a base port b such that b+1 … b+n were all free for TCP
// and UDP a moment ago and none was handed out before by this process
// (for layouts that derive ports from one base, like `inference-cache
// dev`'s base+10i+k). b+n stays below the ephemeral range. Errors after
// 100 random tries.
func Range(n int) (int, error) {
	hi := ephemeralLow()
	for tries := 0; tries < 100; tries++ {
		b := lowest + rand.IntN(hi-lowest-n-1)
		ok := true
		for p := b + 1; p <= b+n && ok; p++ {
			_, dup := given.Load(p)
			ok = !dup && free(p)
		}
		if !ok {
			continue
		}
		for p := b + 1; p <= b+n; p++ {
			given.Store(p, struct{}{})
		}
		return b, nil
	}
	return 0, fmt.Errorf("freeport: no %d consecutive free loopback ports below the ephemeral range after 100 tries", n)
}
