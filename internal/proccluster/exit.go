package proccluster

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Exit is how one run of a Proc ended.
type Exit struct {
	// Err is exec.Cmd.Wait's error: nil for a clean exit, an
	// *exec.ExitError for a non-zero code or a signal.
	Err error
	// RanFor is how long the process ran, so a caller can tell a server
	// that failed to start from one that died while serving.
	RanFor time.Duration
}

// String says how the process ended, in the words the dev command
// prints: "killed by signal SIGKILL", "exited with code 1", "exited
// cleanly".
func (e Exit) String() string {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + signalName(ws.Signal())
		}
		return fmt.Sprintf("exited with code %d", ee.ExitCode())
	}
	if e.Err != nil {
		return e.Err.Error()
	}
	return "exited cleanly"
}

// Signaled reports whether a signal ended the process, and which.
func (e Exit) Signaled() (syscall.Signal, bool) {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal(), true
		}
	}
	return 0, false
}

// signalName is SIGKILL for syscall.SIGKILL (Go's String gives "killed").
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return fmt.Sprintf("%d (%s)", int(s), s)
}
