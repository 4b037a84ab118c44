// Package poll waits for a condition that another goroutine or process
// makes true: it asks the condition again every interval until it holds or
// a time limit passes, and then reports the condition's own last account
// of why it did not hold yet.
//
// Tests use Eventually, which fails the test; harness code that must
// return an error (the chaos runner, the process-cluster harness) uses
// Until. Both ask the condition at once, so a condition that already holds
// costs no wait, and both ask it one last time when the limit passes, so a
// long interval never cuts the limit short.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Cond reports whether the awaited state holds. When it does not, why says
// what was seen instead, in words a failure message can show as is
// ("leader is node 2, want a new one"); why is ignored when ok is true.
// A Cond is called from the goroutine that waits, never concurrently with
// itself. A Cond that finds further waiting pointless (the process it
// waits for exited) records why in a variable of its caller and returns
// true; the caller checks that variable once the wait returns.
type Cond func() (ok bool, why string)

// ErrTimeout is wrapped by the error Until returns when its timeout passes
// before the condition holds.
var ErrTimeout = errors.New("timed out")

// TB is the part of testing.TB that Eventually uses; *testing.T and
// *testing.B satisfy it. It is declared here so that harness packages built
// into binaries do not link the testing package.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually calls cond at once and then every interval until it holds,
// and returns then. If timeout passes first it fails tb with Fatalf,
// giving the timeout and the last why cond gave. A timeout that is not
// positive asks cond once; an interval that is not positive fails tb at
// once, naming the argument. Like Fatalf, it must be called from the
// goroutine running the test.
func Eventually(tb TB, timeout, interval time.Duration, cond Cond) {
	tb.Helper()
	if err := Until(context.Background(), timeout, interval, cond); err != nil {
		tb.Fatalf("%v", err)
	}
}

// Until calls cond at once and then every interval until it holds, and
// returns nil then. It returns an error wrapping ErrTimeout when timeout
// passes first, and one wrapping ctx.Err() when ctx ends first (without
// waiting out the interval); both carry the last why cond gave. A timeout
// that is not positive (a budget already spent) asks cond once. An
// interval that is not positive is refused with an error naming it,
// before cond is called.
func Until(ctx context.Context, timeout, interval time.Duration, cond Cond) error {
	if interval <= 0 {
		return fmt.Errorf("poll: interval %v: must be > 0", interval)
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("poll: %w after %v: %s", ErrTimeout, timeout, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("poll: %w while waiting: %s", ctx.Err(), why)
		case <-time.After(min(interval, left)):
		}
	}
}
