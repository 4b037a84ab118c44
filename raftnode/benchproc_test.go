package raftnode_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the benchmarks read about this process and machine: on a shared
// machine they tell CPU starvation and first-touch page faults apart from
// the work measured.

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runQueueWait sums, over the process's threads, the time they were
// runnable but waiting for a CPU (/proc/self/task/*/schedstat, field 2):
// on a shared machine it tells CPU starvation apart from waiting on I/O
// or on the protocol. Threads that exited are not counted.
func runQueueWait() time.Duration {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sum += time.Duration(v)
			}
		}
	}
	return sum
}

// cpuTime is the process's user+system CPU time so far. The machine is
// shared, so rates are also reported per CPU-second used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults is the process's minor page faults so far
// (/proc/self/stat field 10): anonymous memory touched for the first time
// and file pages (bbolt's mmap) mapped in.
func minorFaults() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields count from ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 8 {
		return 0
	}
	v, _ := strconv.ParseInt(f[7], 10, 64)
	return v
}
