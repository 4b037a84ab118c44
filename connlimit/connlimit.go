// Package connlimit bounds the connections an HTTP server holds without
// letting clients that send nothing hold them all: at the bound, the
// connection that has waited longest for its client (idle between
// requests, not yet sending its request, or stalled in the middle of its
// request body) is closed to make room for a new one, and the listener
// waits only while every connection is serving a request. A proxy under
// a limit on open files stays reachable while thousands of connections
// stall (contract §4, the proxy's connection bound).
package connlimit

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// MinWait is how long a connection stalled in a request body must have
// waited for its client before it may be closed to make room; a new
// connection (no request yet) or an idle keep-alive one must have waited
// 4×MinWait. A client that just connected, or just paused between two
// writes, is not cut off, and a stalled body goes first.
const MinWait = 250 * time.Millisecond

// Limiter bounds the connections of one http.Server. Wire it with
// Listener, and the server's ConnState and ConnContext; handlers mark
// the time they wait for a request body with Waiting. Safe for
// concurrent use.
type Limiter struct {
	max     int
	now     func() time.Time
	mu      sync.Mutex
	conns   map[net.Conn]*entry
	changed chan struct{} // closed and replaced when a connection leaves
	evicted int64
}

// entry is one open connection: since when it waits for its client, if
// it does (idle, new, or stalled in a body), else zero.
type entry struct {
	waitSince time.Time
	state     http.ConnState
	inBody    bool // waiting in a request body (Waiting)
}

// New returns a Limiter of at most n connections (at least 1).
func New(n int) *Limiter {
	return &Limiter{max: max(n, 1), now: time.Now, conns: map[net.Conn]*entry{}, changed: make(chan struct{})}
}

// Max is the bound.
func (l *Limiter) Max() int { return l.max }

// Evicted is the number of connections closed to make room.
func (l *Limiter) Evicted() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// Listener wraps ln: Accept returns only when the new connection fits,
// closing the longest-waiting one if needed.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	ln.l.makeRoom()
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ln.l.mu.Lock()
	ln.l.conns[c] = &entry{waitSince: ln.l.now(), state: http.StateNew}
	ln.l.mu.Unlock()
	return c, nil
}

// makeRoom returns once fewer than max connections are open, closing
// the longest-waiting evictable one while the bound is reached, else
// waiting for one to leave (looking again every MinWait/4).
func (l *Limiter) makeRoom() {
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			l.mu.Unlock()
			return
		}
		victim := l.oldestWaitingLocked()
		if victim != nil {
			delete(l.conns, victim)
			l.evicted++
			l.mu.Unlock()
			_ = victim.Close()
			return
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(MinWait / 4):
		}
	}
}

// oldestWaitingLocked is the connection to close: the one stalled
// longest in a request body past MinWait, else the one waiting longest
// (new or idle) past 4×MinWait; nil when none qualifies.
func (l *Limiter) oldestWaitingLocked() net.Conn {
	var victim net.Conn
	var oldest time.Time
	victimInBody := false
	now := l.now()
	for c, e := range l.conns {
		if e.waitSince.IsZero() {
			continue
		}
		wait := MinWait
		if !e.inBody {
			wait = 4 * MinWait
		}
		if now.Sub(e.waitSince) < wait {
			continue
		}
		better := victim == nil || (e.inBody && !victimInBody) ||
			(e.inBody == victimInBody && e.waitSince.Before(oldest))
		if better {
			victim, oldest, victimInBody = c, e.waitSince, e.inBody
		}
	}
	return victim
}

// ConnState is the server's ConnState hook.
func (l *Limiter) ConnState(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	if s == http.StateClosed || s == http.StateHijacked {
		if ok {
			delete(l.conns, c)
			close(l.changed)
			l.changed = make(chan struct{})
		}
		return
	}
	if !ok {
		return
	}
	e.state = s
	e.inBody = false
	switch s {
	case http.StateIdle:
		e.waitSince = l.now()
	case http.StateActive:
		e.waitSince = time.Time{}
	}
}

type ctxKey struct{}

// ConnContext is the server's ConnContext hook: it lets Waiting find
// the request's connection.
func (l *Limiter) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, ctxKey{}, connRef{l: l, c: c})
}

type connRef struct {
	l *Limiter
	c net.Conn
}

// Waiting marks the connection of the request whose context is ctx as
// waiting for its client since now (on: before each read of the request
// body) or not (off: once the body is read). A connection waiting longer than MinWait may be
// closed to make room. Without a Limiter in ctx it does nothing.
func Waiting(ctx context.Context, on bool) {
	ref, ok := ctx.Value(ctxKey{}).(connRef)
	if !ok {
		return
	}
	l := ref.l
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[ref.c]
	if !ok {
		return
	}
	e.inBody = on
	if on {
		e.waitSince = l.now()
	} else {
		e.waitSince = time.Time{}
	}
}
