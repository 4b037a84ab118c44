package devcluster

import (
	"strings"
	"testing"
	"time"
)

// The proxy's line: rates and shares over the samples in the window.
func TestProxyLine(t *testing.T) {
	p := &proxyLine{proxyURL: "http://127.0.0.1:7461", window: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	if l := p.update(proxySample{at: t0, requests: 10, picks: map[string]float64{"LOAD": 10}}); !strings.HasSuffix(l, "measuring") {
		t.Fatalf("first sample: %q", l)
	}
	l := p.update(proxySample{at: t0.Add(5 * time.Second), requests: 20, picks: map[string]float64{"LOAD": 12, "PREFIX_MATCH": 8},
		prompt: 1000, matched: 400, engineQry: 2000, engineHits: 500})
	want := "proxy http://127.0.0.1:7461: 2.0 requests/s, picks PREFIX_MATCH 80% LOAD 20%, routed hit rate 40%, engines' cache hits 25% (last 5 s)"
	if l != want {
		t.Fatalf("line\n%q\nwant\n%q", l, want)
	}
	// A restarted proxy's counters start over: measured afresh.
	if l := p.update(proxySample{at: t0.Add(6 * time.Second), requests: 1}); !strings.HasSuffix(l, "measuring") {
		t.Fatalf("after a restart: %q", l)
	}
}
