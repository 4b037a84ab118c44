package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/inference-cache/inference-cache/gateway"
)

// logDecision logs a routing decision at debug level with the picker's
// cost terms per candidate, in tokens: why a request went where it went
// (`--log-level debug`). Nothing is formatted at other levels.
func (p *Proxy) logDecision(d *gateway.Decision) {
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	var b strings.Builder
	for i, c := range d.Costs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Replica)
		b.WriteString(" ")
		b.WriteString(c.Reason.String())
		for _, kv := range []struct {
			k string
			v float64
		}{{"cost", c.Cost}, {"cached", float64(c.CachedTokens)}, {"queued", c.QueuedTokens}, {"others", c.OthersTokens}, {"repeated", c.RepeatedTokens},
			{"in_flight", float64(c.InFlight)}, {"others_running", float64(c.OthersRunning)},
			{"engine_waiting", float64(c.ReportedWaiting)}, {"engine_running", float64(c.ReportedRunning)}} {
			b.WriteString(" ")
			b.WriteString(kv.k)
			b.WriteString("=")
			b.WriteString(strconv.FormatFloat(kv.v, 'f', -1, 64))
		}
	}
	p.log.Debug("routing decision", "replica", d.Replica, "reason", d.Reason, "provisional", d.Provisional,
		"prompt_tokens", d.PromptTokens, "matched_tokens", d.MatchedTokens, "lookup", d.Lookup, "turn", d.Turn, "turn_wait", d.TurnWait, "fail_open", d.FailOpen,
		"candidates", b.String())
}
