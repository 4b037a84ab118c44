package localpid

import (
	"net"
	"os"
	"testing"
)

// The exact address wins over a wildcard listener on the same port;
// sockets in other states or on other ports never match.
func TestListening(t *testing.T) {
	ip := net.ParseIP("127.0.0.1")
	socks := []Socket{
		{IP: net.ParseIP("127.0.0.1"), Port: 7401, State: 1, Inode: 11},         // an established connection
		{IP: net.ParseIP("127.0.0.1"), Port: 7402, State: tcpListen, Inode: 12}, // another port
		{IP: net.IPv4zero, Port: 7401, State: tcpListen, Inode: 13},
		{IP: net.ParseIP("127.0.0.1"), Port: 7401, State: tcpListen, Inode: 14},
	}
	if got := Listening(socks, ip, 7401); got != 14 {
		t.Errorf("exact listener: inode %d, want 14", got)
	}
	if got := Listening(socks[:3], ip, 7401); got != 13 {
		t.Errorf("wildcard listener: inode %d, want 13", got)
	}
	if got := Listening(socks[:2], ip, 7401); got != 0 {
		t.Errorf("no listener: inode %d, want 0", got)
	}
}

// A socket this test listens on is found as this process's; a port where
// nothing listens and another host's address give nothing.
func TestPID_FindsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp: not Linux")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if pid, ok := PID(addr); !ok || pid != os.Getpid() {
		t.Errorf("PID(%s) = %d, %v; want %d, true", addr, pid, ok, os.Getpid())
	}
	l.Close()
	if pid, ok := PID(addr); ok {
		t.Errorf("PID(%s) after close = %d, want none", addr, pid)
	}
	if pid, ok := PID("192.0.2.1:7401"); ok { // TEST-NET-1, never this host's
		t.Errorf("PID of another host's address = %d, want none", pid)
	}
}
