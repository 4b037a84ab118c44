// Package localpid finds the process listening on a TCP address of this
// machine, for commands that name a local node's pid beside its address
// (status). Linux only, through /proc (github.com/prometheus/procfs);
// elsewhere, or for an address of another host, there is no answer.
// Lookups never error: a pid that cannot be found is simply absent.
package localpid

import (
	"net"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// tcpListen is the state of a listening socket in /proc/net/tcp{,6}
// (include/net/tcp_states.h: TCP_LISTEN = 10).
const tcpListen = 10

// Socket is one row of /proc/net/tcp{,6}: what Listening needs of it.
type Socket struct {
	IP    net.IP
	Port  uint64
	State uint64
	Inode uint64
}

// Listening is the inode of the socket in socks that listens on ip:port,
// directly or on the unspecified address (0.0.0.0, ::); 0 when none does.
// ip must already be known to be this host's.
func Listening(socks []Socket, ip net.IP, port uint64) uint64 {
	var wildcard uint64
	for _, s := range socks {
		if s.State != tcpListen || s.Port != port || s.Inode == 0 {
			continue
		}
		switch {
		case s.IP.Equal(ip):
			return s.Inode
		case s.IP.IsUnspecified() && wildcard == 0:
			wildcard = s.Inode
		}
	}
	return wildcard
}

// PID is the pid of the process of this machine listening on addr
// (status prints it beside each node, contract §12.4)
// (HOST:PORT, HOST an IP or "localhost"), and whether one was found. An
// address of another host, a process of another user whose descriptors
// cannot be read, or a system without /proc gives false.
func PID(addr string) (int, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0, false
	}
	var ips []net.IP
	if strings.EqualFold(host, "localhost") {
		ips = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	} else if ip := net.ParseIP(host); ip != nil && isLocal(ip) {
		ips = []net.IP{ip}
	}
	if len(ips) == 0 {
		return 0, false
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, false
	}
	var socks []Socket
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := read()
		if err != nil {
			continue
		}
		for _, l := range lines {
			socks = append(socks, Socket{IP: l.LocalAddr, Port: l.LocalPort, State: l.St, Inode: l.Inode})
		}
	}
	var inode uint64
	for _, ip := range ips {
		if inode = Listening(socks, ip, port); inode != 0 {
			break
		}
	}
	if inode == 0 {
		return 0, false
	}
	return owner(fs, inode)
}

// owner is the process holding socket inode open.
func owner(fs procfs.FS, inode uint64) (int, bool) {
	procs, err := fs.AllProcs()
	if err != nil {
		return 0, false
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	for _, pr := range procs {
		targets, err := pr.FileDescriptorTargets()
		if err != nil {
			continue
		}
		for _, t := range targets {
			if t == want {
				return pr.PID, true
			}
		}
	}
	return 0, false
}

// isLocal reports whether ip is a loopback address or one of this host's
// interfaces'.
func isLocal(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
