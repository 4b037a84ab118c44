package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/prompt"
)

// A lookup the cluster refused for its token is a fail-open decision that
// says so (LookupRefused); a timeout or an unreachable node is not one.
func TestDecide_RefusedTokenIsToldApartFromATimeout(t *testing.T) {
	cases := map[string]struct {
		lk   *fakeLookup
		want string
	}{
		"no or an unknown token": {&fakeLookup{resp: &pb.LookupRouteResponse{Detail: "client: Unauthenticated: this call needs the lookup token; failing open"}}, "Unauthenticated"},
		"a lesser token":         {&fakeLookup{resp: &pb.LookupRouteResponse{Detail: "client: PermissionDenied: needs the lookup token; failing open"}}, "PermissionDenied"},
		"a timeout":              {&fakeLookup{wait: true}, ""},
		"an unreachable node":    {&fakeLookup{resp: &pb.LookupRouteResponse{Detail: "client: Unavailable: connection refused; failing open"}}, ""},
	}
	for name, c := range cases {
		g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: c.lk, LookupBudget: 5 * time.Millisecond})
		d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !d.FailOpen || d.LookupRefused != c.want {
			t.Errorf("%s: fail-open %v, refused %q; want a fail-open decision refused %q", name, d.FailOpen, d.LookupRefused, c.want)
		}
	}
}

// Refusals are logged at most once a minute, with the count in between.
func TestRefusedLog_OnceAMinuteWithTheCount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l RefusedLog
	d := &Decision{FailOpen: true, LookupRefused: "Unauthenticated", LookupDetail: "client: Unauthenticated: x; failing open"}
	t0 := time.Unix(1000, 0)
	l.Note(log, &Decision{FailOpen: true}, t0) // not refused: nothing
	for i := 0; i < 5; i++ {
		l.Note(log, d, t0.Add(time.Duration(i)*time.Second))
	}
	l.Note(log, d, t0.Add(time.Minute))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[0], "refused_since_last_line=0") ||
		!strings.Contains(lines[1], "refused_since_last_line=4") || !strings.Contains(lines[1], "code=Unauthenticated") {
		t.Fatalf("log:\n%s\nwant two ERROR lines, the second counting the 4 refusals in between", buf.String())
	}
}
