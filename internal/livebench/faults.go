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

func newFaultRun(st *liveStack, epoch time.Time, recs []bench.Request, speedup float64, errw io.Writer) *faultRun {
	span := time.Duration(float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / speedup * float64(time.Millisecond))
	return &faultRun{st: st, epoch: epoch, span: span, errw: errw, newLeader: -1, backLeader: -1, leaderKill: -1, allDown: -1, engineKill: -1,
		proxyTerm: -1, healthFail: -1}
}

func (f *faultRun) at(share float64) time.Time {
	return f.epoch.Add(time.Duration(share * float64(f.span)))
}

func (f *faultRun) now() time.Duration { return time.Since(f.epoch) }

func (f *faultRun) say(format string, a ...any) {
	line := fmt.Sprintf("%6.1f s  ", f.now().Seconds()) + fmt.Sprintf(format, a...)
	f.mu.Lock()
	f.events = append(f.events, line)
	f.mu.Unlock()
	fmt.Fprintln(f.errw, "bench --live --faults: "+line)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// run injects the faults; it returns when they are done or ctx ends.
func (f *faultRun) run(ctx context.Context) {
	if f.span < faultMinSpan {
		f.mu.Lock()
		f.err = fmt.Sprintf("the replay's arrivals span %v, under the %v the fault schedule needs: replay more --requests or lower --speedup", f.span.Round(time.Second), faultMinSpan)
		f.mu.Unlock()
		return
	}
	st := f.st
	if !sleepUntil(ctx, f.at(faultLeaderAt)) {
		return
	}
	// 1. The leader, SIGKILLed; started again faultNodeBackIn later.
	li, err := proccluster.WaitLeader(ctx, st.members, 5*time.Second)
	if err != nil {
		f.say("no leader to kill: %v", err)
		return
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
	if !sleepUntil(ctx, f.epoch.Add(f.leaderKill+faultNodeBackIn)) {
		return
	}
	if err := st.nodeP[li].Start(); err != nil {
		f.say("restart %s: %v", f.leaderName, err)
	} else {
		f.say("%s started again", f.leaderName)
	}
	// 2. Every node SIGKILLed, started again faultAllDownFor later.
	if !sleepUntil(ctx, f.at(faultAllDownAt)) {
		return
	}
	f.allDown = f.now()
	for _, p := range st.nodeP {
		p.Kill()
	}
	f.say("SIGKILL every node")
	if !sleepUntil(ctx, f.epoch.Add(f.allDown+faultAllDownFor)) {
		return
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
	// 3. One engine SIGKILLed (and left down).
	if !sleepUntil(ctx, f.at(faultEngineAt)) {
		return
	}
	victim := f.busiestEngine(ctx)
	f.engineName = st.fleet.Engines[victim].ID
	f.engineKill = f.now()
	st.engineP[victim].Kill()
	f.say("SIGKILL engine %s (the busiest)", f.engineName)
	// 4. The proxy SIGTERMed under load: it drains until past the replay.
	if !sleepUntil(ctx, f.epoch.Add(f.span-faultProxyLead)) {
		return
	}
	f.proxyTerm = f.now()
	if err := st.proxies[0].Signal(syscall.SIGTERM); err != nil {
		f.say("SIGTERM proxy: %v", err)
		return
	}
	f.say("SIGTERM proxy (drain %v)", faultProxyDrain)
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := hc.Get(st.proxyURL() + "/health")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			f.healthFail = f.now() - f.proxyTerm
			f.say("proxy /health 503 (draining)")
			break
		}
	}
}

// busiestEngine is the engine with the most requests running or waiting
// (its /metrics), so that the kill has requests in flight to fail; it
// polls for up to 10 s while every engine is idle, then takes the first.
func (f *faultRun) busiestEngine(ctx context.Context) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		best, most := 0, 0.0
		for i, e := range f.st.fleet.Engines {
			fams, err := promscrape.Get(ctx, e.URL()+"/metrics")
			if err != nil {
				continue
			}
			if n := promscrape.Sum(fams, "vllm:num_requests_running") + promscrape.Sum(fams, "vllm:num_requests_waiting"); n > most {
				best, most = i, n
			}
		}
		if most > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return best
		}
		time.Sleep(100 * time.Millisecond)
	}
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

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// report measures each fault against the results of the run.
func (f *faultRun) report(rs []loadgen.Result) *faultReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	rep := &faultReport{Events: slices.Clone(f.events), Error: f.err}
	// window counts the requests started in [from, to) ms and those failed.
	window := func(from, to float64) (n, failed int, reasons map[string]int) {
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
	if f.leaderKill >= 0 {
		at := durMs(f.leaderKill)
		n, failed, _ := window(at, at+durMs(faultWindow))
		elect := "no new leader seen within 20 s"
		if f.newLeader >= 0 {
			elect = fmt.Sprintf("a new leader after %.1f s", f.newLeader.Seconds())
		}
		rep.Faults = append(rep.Faults, faultEntry{Fault: "leader " + f.leaderName + " SIGKILLed (started again 5 s later)", AtS: at / 1000,
			Measured: fmt.Sprintf("%d of %d requests sent in the next %v failed; %s", failed, n, faultWindow, elect),
			Target:   "0 failed", Met: failed == 0 && n > 0})
	}
	if f.allDown >= 0 && f.allBack > 0 {
		down, back := durMs(f.allDown), durMs(f.allBack)
		n, failed, reasons := window(down, back)
		n2, failed2, _ := window(back, back+durMs(faultWindow))
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
		rep.Faults = append(rep.Faults, faultEntry{Fault: fmt.Sprintf("all 3 nodes SIGKILLed, down %v", faultAllDownFor), AtS: down / 1000,
			Measured: fmt.Sprintf("%d of %d requests sent while down failed (picked by %s); %d of %d in the %v after the return failed; %s; %s",
				failed, n, countTextInt(reasons), failed2, n2, faultWindow, leader, hitsText),
			Target: "0 failed (picked by load); hits back ≤ 10 s", Met: failed == 0 && failed2 == 0 && n > 0 && hits >= 0 && hits <= durMs(faultHitsBackMax)})
	}
	if f.engineKill >= 0 {
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
		rep.Faults = append(rep.Faults, faultEntry{Fault: "engine " + f.engineName + " SIGKILLed (left down)", AtS: at / 1000,
			Measured: fmt.Sprintf("%d requests in flight on it, %d of them failed; %d other requests failed; %s", inFlight, inFlightFailed, otherFailed, avoid),
			Target:   "only its requests in flight fail; new requests avoid it within 1 s",
			Met:      otherFailed == 0 && (last < 0 || last <= durMs(faultAvoidMax))})
	}
	if f.proxyTerm >= 0 {
		at := durMs(f.proxyTerm)
		n, failed, _ := window(at, at+durMs(faultProxyDrain))
		health := "/health never answered 503"
		if f.healthFail >= 0 {
			health = fmt.Sprintf("/health answered 503 %.0f ms after", durMs(f.healthFail))
		}
		rep.Faults = append(rep.Faults, faultEntry{Fault: fmt.Sprintf("proxy SIGTERMed under load (drain %v)", faultProxyDrain), AtS: at / 1000,
			Measured: fmt.Sprintf("%s; %d of %d requests sent during the drain failed", health, failed, n),
			Target:   "/health 503 within 1 s; 0 failed during the drain",
			Met:      f.healthFail >= 0 && f.healthFail <= faultHealthMax && failed == 0 && n > 0})
	}
	return rep
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
