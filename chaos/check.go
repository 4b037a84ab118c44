package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// check runs every checker after the heal and fills rep.
func (r *Runner) check(ctx context.Context, rep *Report) {
	writes, lookups, regOps := r.w.History()
	rep.Faults = r.faults
	rep.StaleChecks = r.staleChecks
	for _, f := range r.faults {
		rep.Count[f.Kind]++
	}

	if err := r.c.WaitHealthy(ctx, 120*time.Second); err != nil {
		rep.Violations = append(rep.Violations, "after heal: "+err.Error())
	}
	// Equal digests at equal applied index, at the end.
	if d, err := r.c.WaitSameDigest(ctx, 60*time.Second); err != nil {
		rep.Violations = append(rep.Violations, err.Error())
	} else {
		rep.FinalIndex, rep.FinalDigest = d.AppliedIndex, d.Digest
		for _, n := range r.c.Nodes {
			r.mon.ObserveDigest(n.ID, d.AppliedIndex, d.Digest)
		}
	}
	twoLeaders, clashes, terms, sp, dp := r.mon.Results()
	rep.TwoLeaders, rep.DigestClashes, rep.Terms, rep.StatusPolls, rep.DigestPolls = twoLeaders, clashes, terms, sp, dp

	// Every acknowledged write on every node.
	rep.Writes = len(writes)
	var acked []*WriteRec
	for _, w := range writes {
		if w.Acked {
			acked = append(acked, w)
		}
	}
	rep.Acked = len(acked)
	rep.Lost, rep.LostSamples = r.checkWrites(ctx, acked)

	// Lookups.
	names := make([]string, len(r.c.Nodes))
	for i, n := range r.c.Nodes {
		names[i] = n.ID
	}
	tallyLookups(rep, lookups, names)
	var lat []time.Duration
	for _, l := range lookups {
		if !l.Err {
			lat = append(lat, l.Lat)
		}
	}
	rep.LookupP99Ms = ms(percentile(lat, 0.99))

	// Per fault: write unavailability and lookup p99 during the fault.
	ackTimes := make([]time.Time, 0, len(acked))
	for _, w := range acked {
		ackTimes = append(ackTimes, w.End)
	}
	slices.SortFunc(ackTimes, func(a, b time.Time) int { return a.Compare(b) })
	for _, f := range r.faults {
		f.WriteUnavailMs = ms(longestGap(ackTimes, f.Start, f.End))
		var fl []time.Duration
		for _, l := range lookups {
			if !l.Err && !l.At.Before(f.Start) && l.At.Before(f.End) {
				fl = append(fl, l.Lat)
			}
		}
		f.Lookups = len(fl)
		f.LookupP99Ms = ms(percentile(fl, 0.99))
		for _, v := range f.Violations {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s %s: %s", f.Kind, f.Target, v))
		}
		if f.Kind == LeaderKill && f.FailoverMs >= 0 {
			rep.FailoverMs = append(rep.FailoverMs, f.FailoverMs)
		}
	}

	// The register.
	r.checkRegister(rep, regOps)
}

// tallyLookups counts the readers' lookups into rep: errors from
// reachable nodes, errors from unreachable ones, and wrong answers (see
// LookupRec.Wrong), with samples naming the node (names[l.Node]).
func tallyLookups(rep *Report, lookups []LookupRec, names []string) {
	rep.Lookups = len(lookups)
	for _, l := range lookups {
		switch {
		case l.Err && l.Counted:
			rep.LookupErrors++
			if len(rep.LookupErrorSamples) < 10 {
				rep.LookupErrorSamples = append(rep.LookupErrorSamples, fmt.Sprintf("%s at %s: %s", names[l.Node], l.At.Format(time.RFC3339Nano), l.Msg))
			}
		case l.Err:
			rep.LookupErrorsUnreachable++
		case l.Wrong:
			rep.LookupWrong++
			if len(rep.LookupWrongSamples) < 10 {
				rep.LookupWrongSamples = append(rep.LookupWrongSamples, fmt.Sprintf("seeded chain on %s at %s: %s", names[l.Node], l.At.Format(time.RFC3339Nano), l.Msg))
			}
		case l.OverBudget:
			rep.LookupOverBudget++
		case l.Stale:
			rep.LookupStale++
		}
	}
}

// checkWrites looks up every acknowledged write's exact chain on every
// node: each must answer PREFIX_MATCH naming the write's replica.
func (r *Runner) checkWrites(ctx context.Context, acked []*WriteRec) (int, []string) {
	type job struct {
		w *WriteRec
		n *Node
	}
	jobs := make(chan job)
	var mu sync.Mutex
	lost := map[string]bool{}
	var samples []string
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				ok, why := r.present(ctx, j.n, j.w)
				// One retry: a transport hiccup is not a loss; and a few
				// more while the answer is the budget's fail-open NO_HINT,
				// which read nothing.
				for try := 0; !ok && try < 5 && (try == 0 || strings.Contains(why, api.DetailTimeout)); try++ {
					if try > 0 && !sleepCtx(ctx, 200*time.Millisecond) {
						break
					}
					ok, why = r.present(ctx, j.n, j.w)
				}
				if !ok {
					mu.Lock()
					lost[j.w.ReqID] = true
					if len(samples) < 20 {
						samples = append(samples, fmt.Sprintf("%s (acked index %d at %s) missing on %s: %s", j.w.ReqID, j.w.Index, j.w.End.Format(time.RFC3339Nano), j.n.ID, why))
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, w := range acked {
		for _, n := range r.c.Nodes {
			jobs <- job{w, n}
		}
	}
	close(jobs)
	wg.Wait()
	return len(lost), samples
}

func (r *Runner) present(ctx context.Context, n *Node, w *WriteRec) (bool, string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := n.IC.LookupRoute(cctx, &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: tenant, TokenIds: w.Tokens()})
	if err != nil {
		return false, err.Error()
	}
	if resp.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
		return false, fmt.Sprintf("%s %q", resp.ReasonCode, resp.Detail)
	}
	for _, h := range resp.Replicas {
		if h.ReplicaId == w.Replica && h.MatchedBlocks == chainTokens/blockSize {
			return true, ""
		}
	}
	return false, fmt.Sprintf("replicas %v", resp.Replicas)
}

// checkRegister runs porcupine over the Sets and the leader Gets, and the
// weaker checks over every read.
func (r *Runner) checkRegister(rep *Report, ops []RegOp) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call.Before(ops[j].Call) })
	countRegOps(rep, ops)
	checkPhantoms(rep, ops, r.w.initial)
	checkLocalReads(rep, ops)
	checkLeaderReads(rep, ops)
	r.checkLinearizable(rep, ops)
}

// countRegOps counts the register's sets, gets and leader gets.
func countRegOps(rep *Report, ops []RegOp) {
	for _, op := range ops {
		if op.In.Set {
			rep.RegSets++
		} else {
			rep.RegGets++
			if op.Leader {
				rep.RegLeaderGets++
			}
		}
	}
}

// checkPhantoms records an anomaly for every get of a value no client
// wrote (nor the initial one) and every policy version seen with two
// values.
func checkPhantoms(rep *Report, ops []RegOp, initial uint32) {
	written := map[uint32]bool{initial: true, 0: true}
	for _, op := range ops {
		if op.In.Set {
			written[op.In.Value] = true
		}
	}
	versionOf := map[uint64]uint32{}
	for _, op := range ops {
		if op.Failed {
			continue
		}
		if !op.In.Set && !written[op.Out.Value] {
			rep.RegisterAnomalies = append(rep.RegisterAnomalies, fmt.Sprintf("get on %s returned %d, which no client wrote", op.Node, op.Out.Value))
		}
		if v, ok := versionOf[op.Out.Version]; ok && v != op.Out.Value {
			rep.RegisterAnomalies = append(rep.RegisterAnomalies, fmt.Sprintf("policy version %d seen with values %d and %d", op.Out.Version, v, op.Out.Value))
		} else {
			versionOf[op.Out.Version] = op.Out.Value
		}
	}
}

// checkLocalReads records an anomaly when, on one node process, a read
// that started after another ended saw an older version (ops in call
// order).
func checkLocalReads(rep *Report, ops []RegOp) {
	byNode := map[string][]RegOp{}
	for _, op := range ops {
		if !op.In.Set && !op.Failed {
			byNode[op.Node] = append(byNode[op.Node], op)
		}
	}
	for node, l := range byNode {
		byRet := slices.Clone(l)
		sort.SliceStable(byRet, func(i, j int) bool { return byRet[i].Ret.Before(byRet[j].Ret) })
		var maxEnded uint64
		var endedAt time.Time
		k := 0
		for _, op := range l { // l is in call order
			for ; k < len(byRet) && byRet[k].Ret.Before(op.Call); k++ {
				if byRet[k].Out.Version > maxEnded {
					maxEnded, endedAt = byRet[k].Out.Version, byRet[k].Ret
				}
			}
			if op.Out.Version < maxEnded {
				rep.RegisterAnomalies = append(rep.RegisterAnomalies, fmt.Sprintf("%s: read at %s saw version %d after a read ending %s saw %d", node, op.Call.Format(time.RFC3339Nano), op.Out.Version, endedAt.Format(time.RFC3339Nano), maxEnded))
				break
			}
		}
	}
}

// checkLeaderReads counts (and samples) the reads from the confirmed
// leader older than a set that had completed before the read started:
// what explains an Illegal linearizability result.
func checkLeaderReads(rep *Report, ops []RegOp) {
	var acked []RegOp
	for _, op := range ops {
		if op.In.Set && !op.Failed && op.Out.Value == op.In.Value {
			acked = append(acked, op)
		}
	}
	sort.SliceStable(acked, func(i, j int) bool { return acked[i].Ret.Before(acked[j].Ret) })
	for _, op := range ops {
		if op.In.Set || op.Failed || !op.Leader {
			continue
		}
		var newest *RegOp
		for i := range acked {
			if !acked[i].Ret.Before(op.Call) {
				break
			}
			if newest == nil || acked[i].Out.Version > newest.Out.Version {
				newest = &acked[i]
			}
		}
		if newest != nil && op.Out.Version < newest.Out.Version {
			rep.StaleLeaderReads++
			if len(rep.StaleLeaderReadSamples) < 10 {
				rep.StaleLeaderReadSamples = append(rep.StaleLeaderReadSamples, fmt.Sprintf(
					"get on confirmed leader %s at %s returned value %d (version %d), but set(%d) → version %d on %s had completed %v earlier",
					op.Node, op.Call.Format("15:04:05.000"), op.Out.Value, op.Out.Version, newest.In.Value, newest.Out.Version, newest.Node, op.Call.Sub(newest.Ret).Round(time.Millisecond)))
			}
		}
	}
}

// checkLinearizable checks the register history (ops in call order) with
// porcupine and, when it is not linearizable, writes the visualization
// into the run's directory.
func (r *Runner) checkLinearizable(rep *Report, ops []RegOp) {
	t0 := time.Time{}
	if len(ops) > 0 {
		t0 = ops[0].Call
	}
	history := porcupineOps(ops, t0)
	rep.RegHistory = len(history)
	model := RegisterModel(0) // the base policy set before the workload started
	res, info := porcupine.CheckOperationsVerbose(model, history, 3*time.Minute)
	rep.Linearizable = string(res)
	if res != porcupine.Ok {
		path := filepath.Join(r.cfg.Dir, "linearizability.html")
		if err := porcupine.VisualizePath(model, info, path); err == nil {
			rep.Visualization = path
		} else {
			rep.Visualization = "visualization failed: " + err.Error()
		}
	}
}

// longestGap is the longest interval within [from, to] without an element
// of ts (sorted), counting from from and to to.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(from) })
	prev := from
	var gap time.Duration
	for ; i < len(ts) && ts[i].Before(to); i++ {
		gap = max(gap, ts[i].Sub(prev))
		prev = ts[i]
	}
	return max(gap, to.Sub(prev))
}

// percentile returns the nearest-rank p-quantile of d (0 for none).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	k := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// percentileF is percentile for float64 values.
func percentileF(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	k := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}
