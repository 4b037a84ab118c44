package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/inference-cache/inference-cache/admission"
	"github.com/inference-cache/inference-cache/connlimit"
)

// Defaults of the bounds on reading request bodies.
const (
	// DefaultMaxBodyBytesInFlight bounds the bytes of the request bodies
	// the proxy holds at once (admission.DefaultMaxBytesInFlight).
	DefaultMaxBodyBytesInFlight = admission.DefaultMaxBytesInFlight
	// DefaultBodyTimeout bounds the reading of one request body, start to
	// end: a client that trickles it gets a 408.
	DefaultBodyTimeout = 60 * time.Second
	// DefaultBodyIdleTimeout bounds the wait for the next bytes of a
	// request body: a client that stops sending it gets a 408.
	DefaultBodyIdleTimeout = 10 * time.Second
)

// errBodyTimeout is the read error of a body past its timeouts.
var errBodyTimeout = errors.New("request body read timed out")

// errOverBudget is the read error of a body whose bytes, as they
// arrive, no longer fit in the bytes in flight.
var errOverBudget = errors.New("request body over the bytes in flight")

// errDeadline is the error of a read past the connection's deadline.
var errDeadline = os.ErrDeadlineExceeded

// bodyReader reads a request body within an idle and a total timeout by
// moving the connection's read deadline before each read, marks its
// connection as waiting for the client meanwhile (connlimit), and holds
// the body's bytes in the bound on bodies in flight as they arrive.
type bodyReader struct {
	ctx      context.Context // the request's
	r        io.Reader
	rc       *http.ResponseController
	idle     time.Duration
	deadline time.Time             // the total timeout's end; zero = none
	adm      *admission.Controller // the bound the bytes read are held in
	held     int64                 // bytes held in adm
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.idle > 0 || !b.deadline.IsZero() {
		d := b.deadline
		if b.idle > 0 {
			if next := time.Now().Add(b.idle); d.IsZero() || next.Before(d) {
				d = next
			}
		}
		_ = b.rc.SetReadDeadline(d)
	}
	connlimit.Waiting(b.ctx, true)
	n, err := b.r.Read(p)
	if err != nil && errors.Is(err, errDeadline) {
		return n, errBodyTimeout
	}
	if n > 0 {
		if !b.adm.Hold(int64(n)) {
			return n, errOverBudget
		}
		b.held += int64(n)
	}
	return n, err
}
