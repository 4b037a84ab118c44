package livebench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"
	"github.com/inference-cache/inference-cache/internal/promscrape"
	"github.com/inference-cache/inference-cache/loadgen"
)

// The fault schedule of bench --live --faults, as shares of the replay's
// arrival span, and how long the cluster stays down.
const (
	faultLeaderAt    = 0.20
	faultAllDownAt   = 0.40
	faultEngineAt    = 0.75
	faultAllDownFor  = 10 * time.Second
	faultNodeBackIn  = 5 * time.Second  // the killed leader is started again
	faultMinSpan     = 80 * time.Second // room for every fault and its measurement
	faultWindow      = 15 * time.Second // requests after a fault counted against it
	faultHitsBackMax = 10 * time.Second
	faultAvoidMax    = time.Second
	// The proxy is SIGTERMed faultProxyLead before the last arrival and
	// drains for faultProxyDrain: every request sent meanwhile must be
	// answered, and /health must fail within faultHealthMax.
	faultProxyLead  = 15 * time.Second
	faultProxyDrain = 20 * time.Second
	faultHealthMax  = time.Second
)

// faultRun injects the faults into a live stack on the replay's time axis
// (from epoch) and records when each happened.
type faultRun struct {
	st    *liveStack
	epoch time.Time
	span  time.Duration
	errw  io.Writer

	mu         sync.Mutex
	events     []string // what was done, for the report
	leaderKill time.Duration
	leaderName string
	newLeader  time.Duration // after leaderKill (-1: none seen)
	allDown    time.Duration
	allBack    time.Duration
	backLeader time.Duration // after allBack (-1: none seen)
	engineKill time.Duration
	engineName string
	proxyTerm  time.Duration
	healthFail time.Duration // after proxyTerm (-1: /health never failed)
	err        string
}

// faultPlan is when the schedule's faults start, as offsets from the
// replay's epoch: the leader's kill, every node's, an engine's and the
// proxy's SIGTERM. The restarts follow the kills they undo by
// faultNodeBackIn and faultAllDownFor.
type faultPlan struct {
	leaderKill, allDown, engineKill, proxyTerm time.Duration
}

// planFaults places the faults on a replay whose arrivals span span: at
// 20 %, 40 % and 75 % of it, and the proxy's SIGTERM faultProxyLead
// before its end. It errors, saying what to change, when span is under
// faultMinSpan, the room every fault and its measurement need.
func planFaults(span time.Duration) (faultPlan, error) {
	if span < faultMinSpan {
		return faultPlan{}, fmt.Errorf("the replay's arrivals span %v, under the %v the fault schedule needs: replay more --requests or lower --speedup", span.Round(time.Second), faultMinSpan)
	}
	at := func(share float64) time.Duration { return time.Duration(share * float64(span)) }
	return faultPlan{leaderKill: at(faultLeaderAt), allDown: at(faultAllDownAt), engineKill: at(faultEngineAt), proxyTerm: span - faultProxyLead}, nil
}

// newFaultRun is the fault schedule for a replay of recs at speedup from
// epoch, against st, its lines on errw.
func newFaultRun(st *liveStack, epoch time.Time, recs []bench.Request, speedup float64, errw io.Writer) *faultRun {
	span := time.Duration(float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / speedup * float64(time.Millisecond))
	return &faultRun{st: st, epoch: epoch, span: span, errw: errw, newLeader: -1, backLeader: -1, leaderKill: -1, allDown: -1, engineKill: -1,
		proxyTerm: -1, healthFail: -1}
}

// now is the time since the replay's epoch.
func (f *faultRun) now() time.Duration { return time.Since(f.epoch) }

// say records an event for the report and prints it on errw.
func (f *faultRun) say(format string, a ...any) {
	line := fmt.Sprintf("%6.1f s  ", f.now().Seconds()) + fmt.Sprintf(format, a...)
	f.mu.Lock()
	f.events = append(f.events, line)
	f.mu.Unlock()
	fmt.Fprintln(f.errw, "bench --live --faults: "+line)
}

// sleepUntil waits until t (offset from the epoch); false when ctx ended
// first.
func (f *faultRun) sleepUntil(ctx context.Context, t time.Duration) bool {
	tm := time.NewTimer(time.Until(f.epoch.Add(t)))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// run injects the faults of the plan in order, each undone before the
// next; it returns when they are done, one could not be injected, or ctx
// ends.
func (f *faultRun) run(ctx context.Context) {
	plan, err := planFaults(f.span)
	if err != nil {
		f.mu.Lock()
		f.err = err.Error()
		f.mu.Unlock()
		return
	}
	for _, step := range []func(context.Context, faultPlan) bool{f.killLeader, f.killAll, f.killEngine, f.termProxy} {
		if !step(ctx, plan) {
			return
		}
	}
}

// killLeader SIGKILLs the leader at plan.leaderKill, times the new
// election, and starts it again faultNodeBackIn after the kill.
func (f *faultRun) killLeader(ctx context.Context, plan faultPlan) bool {
	st := f.st
	if !f.sleepUntil(ctx, plan.leaderKill) {
		return false
	}
	li, err := proccluster.WaitLeader(ctx, st.members, 5*time.Second)
	if err != nil {
		f.say("no leader to kill: %v", err)
		return false
	}
	f.leaderName = st.nodes[li].ID
	f.leaderKill = f.now()
	st.nodeP[li].Kill()
	f.say("SIGKILL leader %s", f.leaderName)
	var rest []proccluster.Member
	for i, m := range st.members {
		if i != li {
			rest = append(rest, m)
		}
	}
	if i, err := proccluster.WaitLeader(ctx, rest, 20*time.Second); err == nil {
		f.newLeader = f.now() - f.leaderKill
		f.say("new leader %s", rest[i].Name)
	}
	if !f.sleepUntil(ctx, f.leaderKill+faultNodeBackIn) {
		return false
	}
	if err := st.nodeP[li].Start(); err != nil {
		f.say("restart %s: %v", f.leaderName, err)
	} else {
		f.say("%s started again", f.leaderName)
	}
	return true
}

// killAll SIGKILLs every node at plan.allDown, starts them again
// faultAllDownFor later and times the election.
func (f *faultRun) killAll(ctx context.Context, plan faultPlan) bool {
	st := f.st
	if !f.sleepUntil(ctx, plan.allDown) {
		return false
	}
	f.allDown = f.now()
	for _, p := range st.nodeP {
		p.Kill()
	}
	f.say("SIGKILL every node")
	if !f.sleepUntil(ctx, f.allDown+faultAllDownFor) {
		return false
	}
	f.allBack = f.now()
	for _, p := range st.nodeP {
		if err := p.Start(); err != nil {
			f.say("restart %s: %v", p.Name(), err)
		}
	}
	f.say("every node started again")
	if _, err := proccluster.WaitLeader(ctx, st.members, 30*time.Second); err == nil {
		f.backLeader = f.now() - f.allBack
		f.say("leader again")
	}
	return true
}

// killEngine SIGKILLs the busiest engine at plan.engineKill and leaves it
// down.
func (f *faultRun) killEngine(ctx context.Context, plan faultPlan) bool {
	if !f.sleepUntil(ctx, plan.engineKill) {
		return false
	}
	victim := f.busiestEngine(ctx)
	f.engineName = f.st.fleet.Engines[victim].ID
	f.engineKill = f.now()
	f.st.engineP[victim].Kill()
	f.say("SIGKILL engine %s (the busiest)", f.engineName)
	return true
}

// termProxy SIGTERMs the first proxy at plan.proxyTerm, under load: it
// drains until past the replay; it times /health's first 503 (within
// 5 s).
func (f *faultRun) termProxy(ctx context.Context, plan faultPlan) bool {
	if !f.sleepUntil(ctx, plan.proxyTerm) {
		return false
	}
	f.proxyTerm = f.now()
	if err := f.st.proxies[0].Signal(syscall.SIGTERM); err != nil {
		f.say("SIGTERM proxy: %v", err)
		return false
	}
	f.say("SIGTERM proxy (drain %v)", faultProxyDrain)
	hc := &http.Client{Timeout: time.Second}
	err := poll.Until(ctx, 5*time.Second, 20*time.Millisecond, func() (bool, string) {
		resp, err := hc.Get(f.st.proxyURL() + "/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable, "/health answered " + resp.Status
	})
	if err == nil {
		f.healthFail = f.now() - f.proxyTerm
		f.say("proxy /health 503 (draining)")
	}
	return true
}

// busiestEngine is the engine with the most requests running or waiting
// (its /metrics), so that the kill has requests in flight to fail; it
// polls for up to 10 s while every engine is idle, then takes the first.
func (f *faultRun) busiestEngine(ctx context.Context) int {
	best := 0
	_ = poll.Until(ctx, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
		most := 0.0
		best = 0
		for i, e := range f.st.fleet.Engines {
			fams, err := promscrape.Get(ctx, e.URL()+"/metrics")
			if err != nil {
				continue
			}
			if n := promscrape.Sum(fams, "vllm:num_requests_running") + promscrape.Sum(fams, "vllm:num_requests_waiting"); n > most {
				best, most = i, n
			}
		}
		return most > 0, "every engine idle"
	})
	return best
}

// faultReport is what each fault did to the requests.
type faultReport struct {
	Faults []faultEntry `json:"faults"`
	Events []string     `json:"events"`
	Error  string       `json:"error,omitempty"`
}

// faultEntry is one fault: when (seconds into the replay), what was
// measured, the target and whether it was met.
type faultEntry struct {
	Fault    string  `json:"fault"`
	AtS      float64 `json:"at_s"`
	Measured string  `json:"measured"`
	Target   string  `json:"target"`
	Met      bool    `json:"met"`
}

// durMs is d in milliseconds.
func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// report measures each fault against the results of the run.
func (f *faultRun) report(rs []loadgen.Result) *faultReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	rep := &faultReport{Events: slices.Clone(f.events), Error: f.err}
	if f.leaderKill >= 0 {
		rep.Faults = append(rep.Faults, f.leaderEntry(rs))
	}
	if f.allDown >= 0 && f.allBack > 0 {
		rep.Faults = append(rep.Faults, f.allDownEntry(rs))
	}
	if f.engineKill >= 0 {
		rep.Faults = append(rep.Faults, f.engineEntry(rs))
	}
	if f.proxyTerm >= 0 {
		rep.Faults = append(rep.Faults, f.proxyEntry(rs))
	}
	return rep
}

// window counts the requests of rs started in [from, to) ms, those that
// failed, and their picks by reason.
func window(rs []loadgen.Result, from, to float64) (n, failed int, reasons map[string]int) {
	reasons = map[string]int{}
	for _, r := range rs {
		if r.StartMs >= from && r.StartMs < to {
			n++
			reasons[r.Reason]++
			if r.Failed() {
				failed++
			}
		}
	}
	return
}

// leaderEntry: no request sent in the faultWindow after the leader's
// kill fails.
func (f *faultRun) leaderEntry(rs []loadgen.Result) faultEntry {
	at := durMs(f.leaderKill)
	n, failed, _ := window(rs, at, at+durMs(faultWindow))
	elect := "no new leader seen within 20 s"
	if f.newLeader >= 0 {
		elect = fmt.Sprintf("a new leader after %.1f s", f.newLeader.Seconds())
	}
	return faultEntry{Fault: "leader " + f.leaderName + " SIGKILLed (started again 5 s later)", AtS: at / 1000,
		Measured: fmt.Sprintf("%d of %d requests sent in the next %v failed; %s", failed, n, faultWindow, elect),
		Target:   "0 failed", Met: failed == 0 && n > 0}
}

// allDownEntry: no request fails while every node is down (they are
// picked by load) or in the faultWindow after, and PREFIX_MATCH picks
// are back within faultHitsBackMax of the return.
func (f *faultRun) allDownEntry(rs []loadgen.Result) faultEntry {
	down, back := durMs(f.allDown), durMs(f.allBack)
	n, failed, reasons := window(rs, down, back)
	n2, failed2, _ := window(rs, back, back+durMs(faultWindow))
	hits := -1.0
	for _, r := range rs {
		if r.StartMs >= back && r.Reason == "PREFIX_MATCH" && !r.Failed() && (hits < 0 || r.StartMs-back < hits) {
			hits = r.StartMs - back
		}
	}
	hitsText := "no PREFIX_MATCH pick after the return"
	if hits >= 0 {
		hitsText = fmt.Sprintf("first PREFIX_MATCH pick %.1f s after the nodes were started again", hits/1000)
	}
	leader := "no leader within 30 s"
	if f.backLeader >= 0 {
		leader = fmt.Sprintf("leader elected %.1f s after the start", f.backLeader.Seconds())
	}
	return faultEntry{Fault: fmt.Sprintf("all 3 nodes SIGKILLed, down %v", faultAllDownFor), AtS: down / 1000,
		Measured: fmt.Sprintf("%d of %d requests sent while down failed (picked by %s); %d of %d in the %v after the return failed; %s; %s",
			failed, n, countTextInt(reasons), failed2, n2, faultWindow, leader, hitsText),
		Target: "0 failed (picked by load); hits back ≤ 10 s", Met: failed == 0 && failed2 == 0 && n > 0 && hits >= 0 && hits <= durMs(faultHitsBackMax)}
}

// engineEntry: only the killed engine's requests in flight fail, and new
// requests avoid it within faultAvoidMax.
func (f *faultRun) engineEntry(rs []loadgen.Result) faultEntry {
	at := durMs(f.engineKill)
	var inFlight, inFlightFailed, otherFailed, newSent int
	last := -1.0
	for _, r := range rs {
		end := r.StartMs + r.E2EMs
		onIt := r.Replica == f.engineName || r.RetriedFrom == f.engineName
		switch {
		case r.StartMs < at && end >= at && (r.Replica == f.engineName || r.Replica == "" && r.Failed()):
			inFlight++
			if r.Failed() {
				inFlightFailed++
			}
		case r.Failed() && end >= at:
			otherFailed++
		}
		if r.StartMs >= at && onIt {
			newSent++
			last = max(last, r.StartMs-at)
		}
	}
	avoid := "no request sent after the kill reached it"
	if last >= 0 {
		avoid = fmt.Sprintf("%d requests sent after the kill reached it (refused and retried, or routed to it), the last %.0f ms after", newSent, last)
	}
	return faultEntry{Fault: "engine " + f.engineName + " SIGKILLed (left down)", AtS: at / 1000,
		Measured: fmt.Sprintf("%d requests in flight on it, %d of them failed; %d other requests failed; %s", inFlight, inFlightFailed, otherFailed, avoid),
		Target:   "only its requests in flight fail; new requests avoid it within 1 s",
		Met:      otherFailed == 0 && (last < 0 || last <= durMs(faultAvoidMax))}
}

// proxyEntry: /health fails within faultHealthMax of the SIGTERM and no
// request sent during the drain fails.
func (f *faultRun) proxyEntry(rs []loadgen.Result) faultEntry {
	at := durMs(f.proxyTerm)
	n, failed, _ := window(rs, at, at+durMs(faultProxyDrain))
	health := "/health never answered 503"
	if f.healthFail >= 0 {
		health = fmt.Sprintf("/health answered 503 %.0f ms after", durMs(f.healthFail))
	}
	return faultEntry{Fault: fmt.Sprintf("proxy SIGTERMed under load (drain %v)", faultProxyDrain), AtS: at / 1000,
		Measured: fmt.Sprintf("%s; %d of %d requests sent during the drain failed", health, failed, n),
		Target:   "/health 503 within 1 s; 0 failed during the drain",
		Met:      f.healthFail >= 0 && f.healthFail <= faultHealthMax && failed == 0 && n > 0}
}

// countTextInt is "LOAD 40, PREFIX_MATCH 2" by count, largest first.
func countTextInt(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var s []kv
	for k, v := range m {
		if k == "" {
			k = "none"
		}
		s = append(s, kv{k, v})
	}
	slices.SortFunc(s, func(a, b kv) int {
		if a.v != b.v {
			return b.v - a.v
		}
		if a.k < b.k {
			return -1
		}
		return 1
	})
	out := ""
	for i, e := range s {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d", e.k, e.v)
	}
	if out == "" {
		return "nothing"
	}
	return out
}

// writeText prints each fault, met or missed, and the events.
func (r *faultReport) writeText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("faults (picker):\n")
	if r.Error != "" {
		fmt.Fprintf(&b, "  not run: %s\n", r.Error)
	}
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %6.1f s  %s: %s\n           measured: %s\n           target: %s\n", f.AtS, f.Fault, metText(f.Met), f.Measured, f.Target)
	}
	b.WriteString("events (seconds into the replay):\n")
	for _, e := range r.Events {
		b.WriteString("  " + e + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
