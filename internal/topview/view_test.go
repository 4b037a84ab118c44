package topview

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The live view's plain mode, line by line, through a leader kill: rates
// and the reason mix come from counter deltas over the interval, the
// leaderless polls are the write outage, and a node that restarts with
// fresh counters adds nothing negative. Expected lines written by hand.
func TestTopView_PlainLinesThroughALeaderChange(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	node := func(addr, id, state string, term, applied uint64, calls map[string]uint64) Node {
		return Node{Addr: addr, ID: id, State: state, Term: term, Applied: applied, Calls: calls}
	}
	down := func(addr string) Node { return Node{Addr: addr, Err: "connection refused"} }
	samples := []Sample{
		{At: at(0), Nodes: []Node{
			node("a:1", "n1", "Leader", 2, 10, map[string]uint64{"PREFIX_MATCH": 10}),
			node("a:2", "n2", "Follower", 2, 10, map[string]uint64{"NO_HINT": 4})}},
		{At: at(1), Nodes: []Node{ // 20 lookups in 1 s: 15 + 5
			node("a:1", "n1", "Leader", 2, 30, map[string]uint64{"PREFIX_MATCH": 25}),
			node("a:2", "n2", "Follower", 2, 30, map[string]uint64{"NO_HINT": 9})}},
		{At: at(2), Nodes: []Node{down("a:1"), // n1 killed: no leader yet
			node("a:2", "n2", "Candidate", 3, 30, map[string]uint64{"NO_HINT": 13})}},
		{At: at(2.5), Nodes: []Node{down("a:1"), // n2 leads 0.5 s after the first leaderless poll
			node("a:2", "n2", "Leader", 3, 31, map[string]uint64{"NO_HINT": 13, "PREFIX_MATCH": 2})}},
		{At: at(3.5), Nodes: []Node{ // n1 back with counters from 0
			node("a:1", "n1", "Follower", 3, 40, map[string]uint64{"PREFIX_MATCH": 3}),
			node("a:2", "n2", "Leader", 3, 40, map[string]uint64{"NO_HINT": 13, "PREFIX_MATCH": 8})}},
	}
	var out bytes.Buffer
	v := &View{}
	for _, s := range samples {
		v.observe(s)
		if err := v.writeLine(&out); err != nil {
			t.Fatal(err)
		}
		v.shown()
	}
	want := []string{
		"top 13:00:00 | n1 Leader t2 applied 10 | n2 Follower t2 applied 10 | lookups counted from this poll on | leader n1",
		"top 13:00:01 | n1 Leader t2 applied 30 | n2 Follower t2 applied 30 | 20.0 lookups/s: PREFIX_MATCH 75%, NO_HINT 25% | leader n1",
		"top 13:00:02 | a:1 down | n2 Candidate t3 applied 30 | 4.0 lookups/s: NO_HINT 100% | no leader for 0.0 s: writes unavailable",
		"top 13:00:02 | a:1 down | n2 Leader t3 applied 31 | 4.0 lookups/s: PREFIX_MATCH 100% | leader n2 since 13:00:02; last change n1 → n2 at 13:00:02, writes unavailable ≈ 0.5 s (± 0.5 s poll)",
		"top 13:00:03 | n1 Follower t3 applied 40 | n2 Leader t3 applied 40 | 6.0 lookups/s: PREFIX_MATCH 100% | leader n2 since 13:00:02; last change n1 → n2 at 13:00:02, writes unavailable ≈ 0.5 s (± 0.5 s poll)",
	}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plain lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A leader already there at top's first poll has no "since" (top --once
// saw no election); one that a poll saw take over has the time of that
// poll. A first poll no node answered says nothing either way.
func TestTopView_LeaderSinceOnlyWhenSeenTakingOver(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	lead := Node{Addr: "a:1", ID: "n1", State: "Leader"}
	follow := Node{Addr: "a:1", ID: "n1", State: "Follower"}
	down := Node{Addr: "a:1", Err: "refused"}
	for _, c := range []struct {
		name  string
		polls [][]Node
		want  string
	}{
		{"leading at the first poll", [][]Node{{lead}, {lead}}, "leader n1"},
		{"elected between polls", [][]Node{{follow}, {lead}}, "leader n1 since 13:00:01"},
		{"first poll unanswered", [][]Node{{down}, {lead}}, "leader n1"},
		{"no answer at all", [][]Node{{down}, {down}}, "no node answered"},
	} {
		v := &View{}
		for i, nodes := range c.polls {
			v.observe(Sample{At: t0.Add(time.Duration(i) * time.Second), Nodes: nodes})
		}
		if got := v.leaderText(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The terminal frame: a table of nodes with the stale reason, the rates,
// the leader line, the demo's latest line and the supervisor's events.
func TestTopView_FrameHoldsNodesDemoAndEvents(t *testing.T) {
	v := &View{}
	at := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	v.observe(Sample{At: at, Nodes: []Node{
		{Addr: "a:1", ID: "n1", State: "Leader", Term: 2, Applied: 7},
		{Addr: "a:2", ID: "n2", State: "Follower", Term: 2, Applied: 5, Stale: true, StaleReason: "no leader contact for 3s"},
		{Addr: "a:3", Err: "refused"},
	}})
	v.demo = "demo fleet (4 engines, lookuproute): 10 requests"
	for i := 0; i < topEvents+2; i++ {
		v.Event("event " + string(rune('a'+i)))
	}
	var out bytes.Buffer
	n, err := v.writeFrame(&out, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "inference-cache top  13:00:00  (every 1s; Ctrl-C quits)\n" +
		"NODE  ADDR  STATE     TERM  APPLIED  STALE\n" +
		"n1    a:1   Leader    2     7        no\n" +
		"n2    a:2   Follower  2     5        yes (no leader contact for 3s)\n" +
		"-     a:3   down      -     -        -\n" +
		"lookups counted from this poll on\n" +
		"leader n1\n" +
		"demo fleet (4 engines, lookuproute): 10 requests\n" +
		"  event c\n  event d\n  event e\n  event f\n  event g\n"
	if out.String() != want {
		t.Fatalf("frame:\n%s\nwant:\n%s", out.String(), want)
	}
	if n != strings.Count(want, "\n") {
		t.Fatalf("writeFrame reported %d lines, wrote %d", n, strings.Count(want, "\n"))
	}
}

// Cut to the terminal's width, no line wraps: the next frame moves back up
// exactly the lines counted (a wrapped demo line left one old header line
// behind per redraw).
func TestTopView_FrameLinesFitTheWidth(t *testing.T) {
	v := &View{demo: strings.Repeat("é", 300)}
	var out bytes.Buffer
	n, err := v.writeFrame(&out, time.Second, 80)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != strings.Repeat("é", 79)+"\n" || n != 1 {
		t.Fatalf("frame %q (%d lines), want 79 characters and one line", out.String(), n)
	}
}

// A supervisor event longer than the terminal is wrapped whole, and the
// line count covers its lines.
func TestTopView_FrameWrapsLongEvents(t *testing.T) {
	v := &View{}
	v.Event("node2 exited with code 1 after 0.4s; its log says: error: " + strings.Repeat("é", 30))
	var out bytes.Buffer
	n, err := v.writeFrame(&out, time.Second, 41)
	if err != nil {
		t.Fatal(err)
	}
	want := "  node2 exited with code 1 after 0.4s; i\n" +
		"      ts log says: error: " + strings.Repeat("é", 14) + "\n" + // 6 + 20 + 14 = 40
		"      " + strings.Repeat("é", 16) + "\n"
	if out.String() != want || n != 3 {
		t.Fatalf("frame (%d lines):\n%s\nwant (3 lines):\n%s", n, out.String(), want)
	}
}

// Each picker sharing its load gets one line, merged over the nodes: the
// freshest report of it and on how many answering nodes it is held (gw-b
// has reached only n1). Expected lines written by hand.
func TestTopView_OneLinePerPicker(t *testing.T) {
	v := &View{}
	at := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	gwA := func(age uint64) Picker {
		return Picker{ID: "gw-a", Replicas: 3, Prefilling: 2, Tokens: 4096, Running: 7, AgeMs: age}
	}
	v.observe(Sample{At: at, Nodes: []Node{
		{Addr: "a:1", ID: "n1", State: "Leader", Term: 2, Applied: 7, Pickers: []Picker{gwA(31), {ID: "gw-b", Replicas: 1, Running: 1, AgeMs: 5}}},
		{Addr: "a:2", ID: "n2", State: "Follower", Term: 2, Applied: 7, Pickers: []Picker{gwA(12)}},
		{Addr: "a:3", Err: "refused"},
	}})
	var out bytes.Buffer
	if _, err := v.writeFrame(&out, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	want := "PICKER  REPLICAS  PREFILLING  PREFILL TOKENS  RUNNING  AGE    ON NODES\n" +
		"gw-a    3         2           4096            7        12 ms  2/2\n" +
		"gw-b    1         0           0               1        5 ms   1/2\n"
	if !strings.Contains(out.String(), "leader n1\n"+want) {
		t.Fatalf("frame:\n%s\nwant after the leader line:\n%s", out.String(), want)
	}
	out.Reset()
	if err := v.writeLine(&out); err != nil {
		t.Fatal(err)
	}
	if w := " | pickers: gw-a 2 prefilling, 7 running on 3 replicas (12 ms ago); gw-b 0 prefilling, 1 running on 1 replicas (5 ms ago)\n"; !strings.HasSuffix(out.String(), w) {
		t.Fatalf("line %q, want it to end %q", out.String(), w)
	}
}

// With more than topPickers pickers, the views list the 20 with the most
// in flight (running, then prefilling, then picker id on a tie) and sum
// the others on one line. Pickers p-01..p-22 run 1..22 requests, each with
// one prefilling; q-tie runs 3 with none prefilling, so it comes after
// p-03. Listed: p-22 down to p-03; left out: q-tie, p-02, p-01, which
// hold 0+1+1 = 2 prefilling and 3+2+1 = 6 running. Worked by hand.
func TestTopView_PickerLinesAreCapped(t *testing.T) {
	var ps []Picker
	for i := 1; i <= 22; i++ {
		ps = append(ps, Picker{ID: fmt.Sprintf("p-%02d", i), Replicas: 1, Prefilling: 1, Running: uint64(i), AgeMs: 3})
	}
	ps = append(ps, Picker{ID: "q-tie", Replicas: 1, Running: 3, AgeMs: 3})
	v := &View{}
	v.observe(Sample{At: time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC), Nodes: []Node{
		{Addr: "a:1", ID: "n1", State: "Leader", Term: 2, Applied: 7, Pickers: ps}}})
	var wantIDs []string
	for i := 22; i >= 3; i-- {
		wantIDs = append(wantIDs, fmt.Sprintf("p-%02d", i))
	}
	const more = "… and 3 more pickers (2 prefilling, 6 running)"

	var out bytes.Buffer
	if _, err := v.writeFrame(&out, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	frame := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	i := slices.IndexFunc(frame, func(l string) bool { return strings.HasPrefix(l, "PICKER ") })
	if i < 0 || len(frame) != i+1+20+1 {
		t.Fatalf("frame:\n%s\nwant a picker header, 20 picker lines and the rest line", out.String())
	}
	var gotIDs []string
	for _, l := range frame[i+1 : i+21] {
		gotIDs = append(gotIDs, strings.Fields(l)[0])
	}
	if !slices.Equal(gotIDs, wantIDs) || frame[i+21] != more {
		t.Fatalf("picker lines %v then %q, want %v then %q", gotIDs, frame[i+21], wantIDs, more)
	}
	if want := "p-22    1         1           0               22       3 ms  1/1"; frame[i+1] != want {
		t.Fatalf("first picker line %q, want %q", frame[i+1], want)
	}

	out.Reset()
	if err := v.writeLine(&out); err != nil {
		t.Fatal(err)
	}
	line := out.String()
	if n := strings.Count(line, " prefilling, "); n != 20+1 { // 20 pickers and the rest
		t.Fatalf("line %q lists %d, want 20 pickers and the rest", line, n)
	}
	if w := " p-03 1 prefilling, 3 running on 1 replicas (3 ms ago); " + more + "\n"; !strings.HasSuffix(line, w) {
		t.Fatalf("line %q, want it to end %q", line, w)
	}
}

// A plain line printed every 10 s counts the lookups of those 10 s: 30
// lookups in the fourth second and none in the last one read 3.0/s, not
// the last poll's 0 (dev prints a line every 10 s while it polls every
// second). Expected figures by hand: 30 lookups / 10 s.
func TestTopView_PlainLineCountsSinceTheLineBefore(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	v := &View{}
	var out bytes.Buffer
	var lines int
	var lastPlain time.Time
	r := RunConfig{Every: time.Second, PlainEvery: 10 * time.Second, Mode: Plain}
	for i := 0; i <= 10; i++ {
		calls := uint64(5)
		if i >= 4 {
			calls = 35
		}
		s := Sample{At: t0.Add(time.Duration(i) * time.Second), Nodes: []Node{
			{Addr: "a:1", ID: "n1", State: "Leader", Term: 2, Calls: map[string]uint64{"PREFIX_MATCH": calls}}}}
		v.observe(s)
		if err := v.print(&out, s, r, &lines, &lastPlain); err != nil {
			t.Fatal(err)
		}
	}
	want := "top 13:00:00 | n1 Leader t2 applied 0 | lookups counted from this poll on | leader n1\n" +
		"top 13:00:10 | n1 Leader t2 applied 0 | 3.0 lookups/s: PREFIX_MATCH 100% | leader n1\n"
	if out.String() != want {
		t.Fatalf("plain lines:\n%swant:\n%s", out.String(), want)
	}
}
