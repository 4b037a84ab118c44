//go:build chaos

package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"
)

// clockOffsetEnv is read by the chaos build only: a Go duration (e.g.
// "11m" or "-10m") added to every wall-clock reading of the server (the
// expire command's now, gossip clock probes, ingest skew checks, lookup
// freshness). Raft and gossip timeouts use the monotonic clock and are
// not affected, as with a real clock that is set wrong.
const clockOffsetEnv = "INFERENCE_CACHE_CHAOS_CLOCK_OFFSET"

// chaosClock returns a clock offset by $INFERENCE_CACHE_CHAOS_CLOCK_OFFSET,
// or nil when the variable is unset. The result keeps time.Now's
// monotonic reading, so elapsed times stay exact.
func chaosClock(log *slog.Logger) (func() time.Time, error) {
	v := os.Getenv(clockOffsetEnv)
	if v == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", clockOffsetEnv, v, err)
	}
	log.Warn("chaos build: this server's wall clock is offset", "offset", d)
	return func() time.Time { return time.Now().Add(d) }, nil
}
