package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func TestRegisterModel_StaleLeaderReadIsIllegal(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ops := []RegOp{
		{Client: 0, In: RegInput{Set: true, Value: 5}, Out: RegOutput{Value: 5, Version: 2}, Call: at(0), Ret: at(10)},
		{Client: 1, Leader: true, Out: RegOutput{Value: 0, Version: 1}, Call: at(20), Ret: at(30)},
	}
	if porcupine.CheckOperations(RegisterModel(0), porcupineOps(ops, t0)) {
		t.Fatal("a leader read older than a completed set was accepted")
	}
	ops[1].Out = RegOutput{Value: 5, Version: 2}
	if !porcupine.CheckOperations(RegisterModel(0), porcupineOps(ops, t0)) {
		t.Fatal("a fresh read was rejected")
	}
}

func TestRegisterModel_UnknownSetMayTakeEffectLater(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ops := []RegOp{
		// A set that timed out (outcome unknown), then a read that sees it
		// long after: legal, the set may have committed late.
		{Client: 0, In: RegInput{Set: true, Value: 7}, Out: RegOutput{Unknown: true}, Failed: true, Call: at(0), Ret: at(3000)},
		{Client: 1, Leader: true, Out: RegOutput{Value: 0}, Call: at(3100), Ret: at(3110)},
		{Client: 1, Leader: true, Out: RegOutput{Value: 7}, Call: at(5000), Ret: at(5010)},
		// Follower reads are not part of the linearizable history.
		{Client: 2, Out: RegOutput{Value: 0}, Call: at(6000), Ret: at(6010)},
	}
	h := porcupineOps(ops, t0)
	if len(h) != 3 {
		t.Fatalf("history has %d ops, want 3 (the follower read excluded)", len(h))
	}
	if !porcupine.CheckOperations(RegisterModel(0), h) {
		t.Fatal("history with a late unknown set rejected")
	}
	// An unknown set nobody observed is dropped.
	ops[2].Out.Value = 0
	if h := porcupineOps(ops, t0); len(h) != 2 {
		t.Fatalf("unobserved unknown set kept: %d ops", len(h))
	}
}

func TestSchedule_InterleavesKindsAndHonoursCounts(t *testing.T) {
	s := Schedule(map[FaultKind]int{LeaderKill: 5, LeaderPause: 2, IsolateLeader: 1})
	got := map[FaultKind]int{}
	for _, k := range s {
		got[k]++
	}
	if got[LeaderKill] != 5 || got[LeaderPause] != 2 || got[IsolateLeader] != 1 || len(s) != 8 {
		t.Fatalf("schedule %v", s)
	}
	if s[0] != LeaderKill || s[1] != LeaderPause {
		t.Fatalf("schedule does not interleave: %v", s)
	}
}

func TestLongestGap_CountsFromFaultStartToEnd(t *testing.T) {
	t0 := time.Unix(100, 0)
	ts := []time.Time{t0.Add(-time.Second), t0.Add(300 * time.Millisecond), t0.Add(1500 * time.Millisecond), t0.Add(1600 * time.Millisecond)}
	if g := longestGap(ts, t0, t0.Add(2*time.Second)); g != 1200*time.Millisecond {
		t.Fatalf("gap %v, want 1.2s", g)
	}
	if g := longestGap(nil, t0, t0.Add(time.Second)); g != time.Second {
		t.Fatalf("no acks: gap %v, want the whole window", g)
	}
}

func TestReport_SummaryLinesAreExact(t *testing.T) {
	r := newReport()
	r.Count[LeaderKill], r.Count[LeaderPause], r.Count[IsolateLeader], r.Count[SplitMinority] = 21, 5, 3, 2
	r.Acked, r.FailoverMs, r.Linearizable = 10, []float64{900, 1100, 1000}, "Ok"
	want := "leader kills: 21\nleader pauses: 5\npartitions: 5\nacknowledged writes: 10\nlost acknowledged writes: 0\nlookup errors: 0\nfailover median ms: 1000\nfailover p99 ms: 1100\nlinearizable: yes"
	if got := strings.Join(r.SummaryLines(), "\n"); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if md := r.Markdown("make chaos"); !strings.Contains(md, "\n"+want+"\n") {
		t.Fatal("markdown lacks the summary lines one per line")
	}
}

func TestReport_SummaryLinesNameWhatBroke(t *testing.T) {
	r := newReport()
	r.Linearizable = "Ok"
	r.Violations = []string{"leader-kill n2: leader kill: no leader within 10s"}
	r.LookupWrong, r.LookupWrongSamples = 2, []string{"n1: NO_MATCH"}
	got := strings.Join(r.SummaryLines(), "\n")
	for _, want := range []string{"\nbroken: wrong lookup answers: 2; first: n1: NO_MATCH", "\nbroken: leader-kill n2: leader kill: no leader within 10s"} {
		if !strings.Contains(got, want) {
			t.Fatalf("summary lacks %q:\n%s", want, got)
		}
	}
	if r.Passed() {
		t.Fatal("a report with violations passed")
	}
}
