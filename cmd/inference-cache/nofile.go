package main

import (
	"syscall"
)

// fdsPerConnection is the open files one proxied request holds: the
// client's connection and the backend's.
const fdsPerConnection = 2

// fdsReserved are the open files kept aside for everything but client
// connections: listeners, the cluster's gRPC connections, health checks,
// logs.
const fdsReserved = 64

// raiseNoFile raises the soft limit on open files to the hard limit (the
// Go runtime does so too since Go 1.19; this makes it explicit and
// reports the result) and returns the soft limit now in force (0 when
// unknown).
func raiseNoFile() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	return lim.Cur
}

// connectionBound is the client connections a proxy may hold: want,
// lowered to what the open-file limit nofile leaves (0 = unknown: want).
func connectionBound(want int, nofile uint64) int {
	if nofile == 0 || nofile > 1<<30 {
		return want
	}
	fit := (int(nofile) - fdsReserved) / fdsPerConnection
	return max(min(want, fit), 1)
}
