package chaos

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Report is the outcome of one run: what was injected, what the workload
// did, and every invariant held or broken.
type Report struct {
	Nodes      int
	FastTiming bool
	Netns      bool
	// PartitionsSkipped says why partitions did not run ("" = they did).
	PartitionsSkipped string
	SkippedFaults     int
	// Skipped says why other faults did not run, one line per kind.
	Skipped  []string
	Duration time.Duration
	// LoadBefore and LoadAfter: `uptime` at start and end (the machine is
	// shared).
	LoadBefore, LoadAfter string

	Faults []*FaultRec
	Count  map[FaultKind]int
	// FailoverMs: per leader kill, fault → new leader.
	FailoverMs []float64

	Writes, Acked, Lost int
	LostSamples         []string

	Lookups, LookupErrors, LookupErrorsUnreachable int
	LookupErrorSamples                             []string
	// LookupWrong counts fresh answers from reachable nodes that were not
	// a PREFIX_MATCH of the seeded chain (LookupRec.Wrong); LookupStale
	// the answers marked stale, which may miss it.
	LookupWrong, LookupStale int
	// LookupOverBudget counts the answers that were the lookup budget's
	// fail-open NO_HINT (LookupRec.OverBudget): reported, not a failure.
	LookupOverBudget   int
	LookupWrongSamples []string
	LookupP99Ms        float64
	StaleChecks        int

	RegSets, RegGets, RegLeaderGets, RegHistory int
	// Linearizable is porcupine's result: Ok, Illegal or Unknown.
	Linearizable      string
	Visualization     string
	RegisterAnomalies []string
	// StaleLeaderReads: Gets answered by a confirmed leader that returned a
	// version older than a Set completed before the Get started.
	StaleLeaderReads       int
	StaleLeaderReadSamples []string

	TwoLeaders, DigestClashes       []string
	Terms, StatusPolls, DigestPolls int
	FinalIndex, FinalDigest         uint64
	Violations                      []string
	HarnessError                    string
}

// newReport returns an empty report.
func newReport() *Report { return &Report{Count: map[FaultKind]int{}} }

// Partitions is the number of partitions injected.
func (r *Report) Partitions() int {
	return r.Count[IsolateLeader] + r.Count[IsolateFollower] + r.Count[SplitMinority]
}

// FailoverMedianMs and FailoverP99Ms summarize FailoverMs (nearest rank).
func (r *Report) FailoverMedianMs() float64 { return percentileF(r.FailoverMs, 0.5) }

// FailoverP99Ms is the nearest-rank p99 of FailoverMs.
func (r *Report) FailoverP99Ms() float64 { return percentileF(r.FailoverMs, 0.99) }

// LinearizableYes is true when porcupine found the register history
// linearizable.
func (r *Report) LinearizableYes() bool { return r.Linearizable == "Ok" }

// Passed reports whether every invariant held and the harness finished.
func (r *Report) Passed() bool {
	return r.HarnessError == "" && r.Lost == 0 && r.LookupErrors == 0 && r.LookupWrong == 0 && r.LinearizableYes() &&
		len(r.TwoLeaders) == 0 && len(r.DigestClashes) == 0 && len(r.Violations) == 0 && len(r.RegisterAnomalies) == 0
}

// SummaryLines are the comparable lines of a run, exactly (CHAOS.md).
func (r *Report) SummaryLines() []string {
	lin := "no"
	if r.LinearizableYes() {
		lin = "yes"
	}
	lines := []string{
		fmt.Sprintf("leader kills: %d", r.Count[LeaderKill]),
		fmt.Sprintf("leader pauses: %d", r.Count[LeaderPause]),
		fmt.Sprintf("partitions: %d", r.Partitions()),
		fmt.Sprintf("acknowledged writes: %d", r.Acked),
		fmt.Sprintf("lost acknowledged writes: %d", r.Lost),
		fmt.Sprintf("lookup errors: %d", r.LookupErrors),
		fmt.Sprintf("failover median ms: %.0f", r.FailoverMedianMs()),
		fmt.Sprintf("failover p99 ms: %.0f", r.FailoverP99Ms()),
		"linearizable: " + lin,
	}
	return append(lines, r.brokenLines()...)
}

// brokenLines names each broken invariant the summary's counts do not show,
// with its first sample, so that a failed run's last lines say what broke.
func (r *Report) brokenLines() []string {
	var out []string
	first := func(what string, n int, samples []string) {
		if n == 0 {
			return
		}
		line := fmt.Sprintf("broken: %s: %d", what, n)
		if len(samples) > 0 {
			line += "; first: " + samples[0]
		}
		out = append(out, line)
	}
	if r.HarnessError != "" {
		out = append(out, "broken: harness: "+r.HarnessError)
	}
	first("wrong lookup answers", r.LookupWrong, r.LookupWrongSamples)
	first("two leaders in one term", len(r.TwoLeaders), r.TwoLeaders)
	first("digest clashes", len(r.DigestClashes), r.DigestClashes)
	first("register anomalies", len(r.RegisterAnomalies), r.RegisterAnomalies)
	for _, v := range r.Violations {
		out = append(out, "broken: "+v)
	}
	return out
}

func held(ok bool) string {
	if ok {
		return "held"
	}
	return "**BROKEN**"
}

// Markdown renders the report (CHAOS.md). command is how the run was
// started.
func (r *Report) Markdown(command string) string {
	w := &mdWriter{}
	r.mdSummary(w, command)
	r.mdSetup(w)
	r.mdFaults(w)
	r.mdInvariants(w)
	r.mdSamples(w)
	r.mdFailover(w)
	r.mdPerFault(w)
	return w.b.String()
}

// mdWriter accumulates the report's Markdown, one line per p.
type mdWriter struct{ b strings.Builder }

// p appends one line, formatted as by fmt.Sprintf.
func (w *mdWriter) p(format string, a ...any) { fmt.Fprintf(&w.b, format+"\n", a...) }

// mdSummary writes the title, how the report was made and the summary
// lines.
func (r *Report) mdSummary(w *mdWriter, command string) {
	w.p("# Chaos run report")
	w.p("")
	w.p("Written by `%s` (package `chaos`): real `inference-cache server` processes, real faults, a recorded history and checkers. Rerun to compare; the lines below are stable.", command)
	w.p("")
	w.p("```")
	for _, l := range r.SummaryLines() {
		w.p("%s", l)
	}
	w.p("```")
	w.p("")
}

// mdSetup writes the cluster, timing, machine load and workload.
func (r *Report) mdSetup(w *mdWriter) {
	w.p("## Setup")
	w.p("")
	timing := "LAN defaults (heartbeat 500 ms, election 500 ms, lease 250 ms: a follower starts an election after 0.5–1 s of silence)"
	if r.FastTiming {
		timing = "`--fast-timing` (heartbeat/election 150 ms)"
	}
	w.p("- %d server nodes, Raft timing: %s.", r.Nodes, timing)
	if r.Netns {
		w.p("- Each node in its own network namespace on a private bridge (veth pairs); partitions are blackhole routes between namespaces.")
	} else {
		w.p("- Nodes on 127.0.0.1; partitions skipped: %s.", r.PartitionsSkipped)
	}
	w.p("- Duration %v. Load (`uptime`) at start: `%s`; at end: `%s`. The machine has 2 cores shared with other builds and tests.", r.Duration.Round(time.Second), r.LoadBefore, r.LoadAfter)
	w.p("- Workload: 4 ingest writers (one unique 8-block chain and request id per write, SDK retries with the same id), one LookupRoute reader per node, 2 SetCachePolicy writers and 3 GetCachePolicy readers (every other read sent to the node the status poller last saw as leader; it counts as a leader read when that node reports Leader in the same term right before and after the call, and only those enter the linearizability check — reads from other nodes are local reads, stale by design (contract §8.4), checked for no phantom values and per-process monotonic versions).")
	w.p("")
}

// mdFaults writes how many faults of each kind ran and which were skipped.
func (r *Report) mdFaults(w *mdWriter) {
	w.p("## Faults injected")
	w.p("")
	w.p("| kind | count |")
	w.p("|---|---|")
	for _, k := range AllFaults {
		w.p("| %s | %d |", k, r.Count[k])
	}
	if r.SkippedFaults > 0 {
		w.p("")
		w.p("%d faults skipped.", r.SkippedFaults)
		if r.PartitionsSkipped != "" {
			w.p("Partitions and the full disk (root only): %s.", r.PartitionsSkipped)
		}
		for _, s := range r.Skipped {
			w.p("- %s", s)
		}
	}
	w.p("")
}

// mdInvariants writes the table of invariants, each held or not with its
// measure.
func (r *Report) mdInvariants(w *mdWriter) {
	w.p("## Invariants")
	w.p("")
	w.p("| invariant | result | detail |")
	w.p("|---|---|---|")
	w.p("| every acknowledged ingest present on every node after heal (LookupRoute, exact chain) | %s | %d acknowledged of %d writes, %d lost, checked on %d nodes |", held(r.Lost == 0), r.Acked, r.Writes, r.Lost, r.Nodes)
	w.p("| equal digests at equal applied index (sampled during the run and at the end) | %s | %d digest samples, final index %d digest %016x, %d clashes |", held(len(r.DigestClashes) == 0 && r.FinalIndex > 0), r.DigestPolls, r.FinalIndex, r.FinalDigest, len(r.DigestClashes))
	w.p("| zero LookupRoute errors from reachable nodes | %s | %d lookups, %d errors from reachable nodes (%d more while the node was down, paused or starting), p99 %.1f ms |", held(r.LookupErrors == 0), r.Lookups, r.LookupErrors, r.LookupErrorsUnreachable, r.LookupP99Ms)
	w.p("| the seeded chain answered PREFIX_MATCH by every reachable node not marked stale that has applied it | %s | %d wrong answers (%d answers marked stale) |", held(r.LookupWrong == 0), r.LookupWrong, r.LookupStale)
	w.p("| (reported, not an invariant) lookups answered with the budget's fail-open NO_HINT (lookupTimeoutMs spent before the state was read, §5.7) | - | %d of %d |", r.LookupOverBudget, r.Lookups)
	w.p("| stale = true on a partitioned minority after maxStaleness (2 s) | %s | %d minority nodes checked |", held(!hasViolation(r.Violations, "partitioned")), r.StaleChecks)
	w.p("| never two leaders in one term (Cluster.Status on every node every 50 ms) | %s | %d terms seen, %d status polls |", held(len(r.TwoLeaders) == 0), r.Terms, r.StatusPolls)
	w.p("| policy register linearizable (porcupine) | %s | %d sets, %d gets (%d to the leader); history checked: %d ops; result %s |", held(r.LinearizableYes()), r.RegSets, r.RegGets, r.RegLeaderGets, r.RegHistory, r.Linearizable)
	w.p("| reads from the confirmed leader never older than a completed set | %s | %d stale leader reads |", held(r.StaleLeaderReads == 0), r.StaleLeaderReads)
	w.p("| local policy reads: no phantom values, monotonic per node process | %s | %d anomalies |", held(len(r.RegisterAnomalies) == 0), len(r.RegisterAnomalies))
	memb, rss := "", ""
	for _, f := range r.Faults {
		if f.Kind == GossipCut && f.MembershipMs > 0 {
			memb += fmt.Sprintf(" %.0f ms", f.MembershipMs)
		}
		if f.Kind == IngestFlood {
			rss += fmt.Sprintf(" %d → %d (peak) → %d MiB %v later;", f.RSSMiB[0], f.RSSMiB[1], f.RSSMiB[2], rssAfter)
		}
	}
	w.p("| membership converged within %v after a gossip-only partition healed (a follower restarted during it; ingest through it acknowledged during and after) | %s | %d gossip partitions; converged after:%s |", membershipBound, held(!hasViolation(r.Violations, "membership") && !hasViolation(r.Violations, "ingest through")), r.Count[GossipCut], memb)
	w.p("| Raft-only partition of the leader: the majority elects a leader, the cut node steps down and is reported unhealthy although gossip sees it | %s | %d Raft partitions |", held(!hasViolation(r.Violations, "Raft")), r.Count[RaftCut])
	w.p("| a leader whose clock is ahead by more than the eviction TTL drops or hides no acknowledged write (sampled on every node after %v as leader) | %s | %d clock-skew faults |", 25*time.Second, held(!hasViolation(r.Violations, "skewed")), r.Count[ClockSkew])
	w.p("| a leader with a full disk steps down, is not elected again while full, is reported unhealthy, and catches up once space is freed | %s | %d full-disk faults |", held(!hasViolation(r.Violations, "disk")), r.Count[LeaderDiskFull])
	w.p("| an ingest-stream flood (%d connections × %d streams that never read) leaves the other writers ≥ 50 %% of their acks at ≤ 10× their median latency | %s | %d floods; leader RSS:%s |", floodConns, floodStreams, held(!hasViolation(r.Violations, "starved")), r.Count[IngestFlood], rss)
	w.p("| every fault's own checks (new leader elected, paused/cut-off leader steps down) | %s | %d violations |", held(len(r.Violations) == 0), len(r.Violations))
}

// mdSamples writes where the linearizability visualization is, a harness
// error, and up to 20 samples of each kind of failure.
func (r *Report) mdSamples(w *mdWriter) {
	if r.Visualization != "" {
		w.p("")
		w.p("Linearizability visualization: `%s`.", r.Visualization)
	}
	if r.HarnessError != "" {
		w.p("")
		w.p("Harness stopped early: %s", r.HarnessError)
	}
	for _, l := range [][]string{r.LostSamples, r.LookupErrorSamples, r.LookupWrongSamples, r.StaleLeaderReadSamples, r.TwoLeaders, r.DigestClashes, r.Violations, r.RegisterAnomalies} {
		for i, s := range l {
			if i == 0 {
				w.p("")
			}
			if i >= 20 {
				w.p("- … %d more", len(l)-20)
				break
			}
			w.p("- %s", s)
		}
	}
	w.p("")
}

// mdFailover writes the leader-kill failover times.
func (r *Report) mdFailover(w *mdWriter) {
	w.p("## Failover")
	w.p("")
	w.p("Failover = SIGKILL of the leader → a surviving node reports state Leader in a newer term (Status polled every 10 ms). Over %d leader kills: median %.0f ms, p99 %.0f ms, max %.0f ms (targets: median ≤ 1500 ms, p99 ≤ 3000 ms).", len(r.FailoverMs), r.FailoverMedianMs(), r.FailoverP99Ms(), percentileF(r.FailoverMs, 1))
	w.p("")
}

// mdPerFault writes one table row per injected fault.
func (r *Report) mdPerFault(w *mdWriter) {
	w.p("## Per fault")
	w.p("")
	w.p("Write unavailability = the longest stretch between the fault and the return to health with no ingest acknowledged; lookup p99 over the lookups started in that window.")
	w.p("")
	w.p("| # | fault | target | failover ms | write unavailability ms | lookup p99 ms | lookups | healthy after ms | notes |")
	w.p("|---|---|---|---|---|---|---|---|---|")
	for i, f := range r.Faults {
		fo := "–"
		if f.FailoverMs >= 0 {
			fo = fmt.Sprintf("%.0f", f.FailoverMs)
		}
		notes := strings.Join(append(append([]string{}, f.Notes...), f.Violations...), "; ")
		w.p("| %d | %s | %s | %s | %.0f | %.1f | %d | %.0f | %s |", i+1, f.Kind, f.Target, fo, f.WriteUnavailMs, f.LookupP99Ms, f.Lookups, ms(f.End.Sub(f.Start)), strings.ReplaceAll(notes, "|", "/"))
	}
}

func hasViolation(v []string, sub string) bool {
	for _, s := range v {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// WriteFile writes the Markdown report to path.
func (r *Report) WriteFile(path, command string) error {
	return os.WriteFile(path, []byte(r.Markdown(command)), 0o644)
}
