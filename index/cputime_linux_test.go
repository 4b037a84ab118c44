package index

import (
	"syscall"
	"time"
)

// threadCPU returns the calling thread's CPU time (RUSAGE_THREAD). The
// benchmarks report it next to wall time because the benchmark machine is
// shared: wall time counts the time other processes hold the CPU, CPU time
// does not (cache pollution by them still shows).
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCPU returns the whole process's CPU time (RUSAGE_SELF): for
// benchmarks whose cost includes the GC's background work and page faults
// of fresh memory on other threads.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
