package simengine

import "time"

// Clock is the engine's time source: Now stamps requests and KV-event
// batches, AfterFunc schedules the end of a prefill and each decode step.
// The default is the wall clock; tests inject a manual clock and step it,
// so that no assertion waits on real time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled call; Stop cancels it and reports whether it had
// not run yet.
type Timer interface {
	Stop() bool
}

// wallClock is Clock on package time.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
