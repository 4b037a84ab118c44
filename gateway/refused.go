package gateway

import (
	"log/slog"
	"sync"
	"time"
)

// refusedLogEvery is the least time between two log lines about lookups
// the cluster refused: a wrong token refuses every lookup, and the count
// is in the metrics.
const refusedLogEvery = time.Minute

// RefusedLog writes, at most once per minute, an ERROR line for decisions
// whose lookup the cluster refused for its token (Decision.LookupRefused),
// with how many were refused since the last line. A wrong or missing
// lookup token otherwise looks like a cluster that never answers: every
// request fails open. The proxy and the endpoint picker share it. The
// zero value is ready; it is safe for concurrent use.
type RefusedLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// Note logs d's refusal when one is due at now; it does nothing for a
// decision whose lookup was not refused.
func (l *RefusedLog) Note(log *slog.Logger, d *Decision, now time.Time) {
	if d.LookupRefused == "" {
		return
	}
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < refusedLogEvery {
		l.skipped++
		l.mu.Unlock()
		return
	}
	n := l.skipped
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	log.Error("the cluster refused the lookup token: requests are routed without hints until it is fixed (--token-file or INFERENCE_CACHE_TOKEN; docs/security.md)",
		"code", d.LookupRefused, "detail", d.LookupDetail, "refused_since_last_line", n)
}
