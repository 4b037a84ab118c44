package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records what Eventually reports instead of failing the test.
type fakeTB struct {
	failed []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = append(f.failed, fmt.Sprintf(format, args...))
}

func TestEventually_ReturnsAsSoonAsTheConditionHolds(t *testing.T) {
	calls := 0
	tb := &fakeTB{}
	// An interval of an hour: a return before the test times out means no
	// wait followed the call that held.
	Eventually(tb, time.Hour, time.Hour, func() (bool, string) {
		calls++
		return true, "unused"
	})
	if len(tb.failed) != 0 || calls != 1 {
		t.Fatalf("calls %d, failures %q: want 1 call and no failure", calls, tb.failed)
	}

	calls = 0
	Eventually(tb, time.Hour, time.Millisecond, func() (bool, string) {
		calls++
		return calls == 3, "not yet"
	})
	if len(tb.failed) != 0 || calls != 3 {
		t.Fatalf("calls %d, failures %q: want 3 calls (none after the one that held) and no failure", calls, tb.failed)
	}
}

func TestEventually_FailsOnTimeoutWithTheLastReason(t *testing.T) {
	calls := 0
	tb := &fakeTB{}
	Eventually(tb, 30*time.Millisecond, time.Millisecond, func() (bool, string) {
		calls++
		return false, fmt.Sprintf("attempt %d of the leader check", calls)
	})
	if len(tb.failed) != 1 {
		t.Fatalf("failures %q: want exactly one", tb.failed)
	}
	msg := tb.failed[0]
	last := fmt.Sprintf("attempt %d of the leader check", calls)
	if calls < 2 || !strings.HasSuffix(msg, ": "+last) || !strings.Contains(msg, "30ms") {
		t.Fatalf("after %d calls the failure reads %q: want the timeout 30ms and the last reason %q", calls, msg, last)
	}
}

func TestEventually_RefusesANonPositiveInterval(t *testing.T) {
	tb := &fakeTB{}
	called := false
	Eventually(tb, time.Second, -time.Millisecond, func() (bool, string) { called = true; return true, "" })
	if called || len(tb.failed) != 1 || !strings.Contains(tb.failed[0], "interval -1ms: must be > 0") {
		t.Fatalf("called %v, failures %q: want no call and one failure naming the interval", called, tb.failed)
	}
}

func TestUntil_ANonPositiveTimeoutAsksOnce(t *testing.T) {
	for _, timeout := range []time.Duration{0, -time.Second} {
		calls := 0
		err := Until(context.Background(), timeout, time.Hour, func() (bool, string) {
			calls++
			return false, "budget spent"
		})
		if calls != 1 || !errors.Is(err, ErrTimeout) || !strings.HasSuffix(err.Error(), ": budget spent") {
			t.Errorf("timeout %v: err %v after %d calls; want ErrTimeout with the reason after one call", timeout, err, calls)
		}
		calls = 0
		if err := Until(context.Background(), timeout, time.Hour, func() (bool, string) { calls++; return true, "" }); err != nil || calls != 1 {
			t.Errorf("timeout %v, condition holding: err %v after %d calls; want nil after one", timeout, err, calls)
		}
	}
}

func TestUntil_AsksOnceMoreWhenTheTimeoutPassesInsteadOfSleepingAWholeInterval(t *testing.T) {
	calls := 0
	start := time.Now()
	err := Until(context.Background(), 20*time.Millisecond, time.Hour, func() (bool, string) {
		calls++
		return calls == 2, "first call"
	})
	if err != nil || calls != 2 {
		t.Fatalf("err %v after %d calls: want the second call, at the timeout, to succeed", err, calls)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("second call after %v: want it no sooner than the 20ms timeout", waited)
	}
}

func TestUntil_TimeoutErrorWrapsErrTimeoutAndCarriesTheLastReason(t *testing.T) {
	err := Until(context.Background(), 10*time.Millisecond, time.Millisecond, func() (bool, string) {
		return false, "applied index 7, want 9"
	})
	if !errors.Is(err, ErrTimeout) || !strings.HasSuffix(err.Error(), ": applied index 7, want 9") {
		t.Fatalf("err %v: want ErrTimeout with the last reason", err)
	}
}

func TestUntil_ReturnsWhenTheContextEndsWithoutWaitingOutTheInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Until(ctx, time.Hour, time.Hour, func() (bool, string) {
		calls++
		cancel() // ends ctx while Until is about to wait an hour
		return false, "node 3 still down"
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) || !strings.HasSuffix(err.Error(), ": node 3 still down") || calls != 1 {
		t.Fatalf("err %v after %d calls: want context.Canceled with the last reason after one call", err, calls)
	}
}
