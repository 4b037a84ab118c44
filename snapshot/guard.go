package snapshot

import (
	"fmt"
	"runtime/debug"
)

// bbolt reads its file through mmap and trusts the page ids it finds: a
// crafted body that passes the stream checksum (xxh3 is not a MAC) can
// point a page past the end of the file, and the read faults (SIGBUS),
// which would kill the process — found by FuzzRead. Read, Inspect and the
// block decoder goroutine therefore turn faults into panics
// (debug.SetPanicOnFault, per goroutine) and panics into ErrCorrupt. A
// refused file of that kind may leave its temporary file behind (the node
// clears its tmp directory at start). The page-graph check (pagecheck.go)
// now refuses such pages before bbolt opens the file; the guard stays for
// whatever reaches bbolt anyway.

// faultGuard makes a memory fault in the calling goroutine a panic; the
// returned func restores the previous setting.
func faultGuard() func() {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

// recoverCorrupt turns a panic (a fault in the mmap'd file, or bbolt's own
// consistency panics) into an ErrCorrupt error in *err.
func recoverCorrupt(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: malformed bbolt file: %v", ErrCorrupt, r)
	}
}
