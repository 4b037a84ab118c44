package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Config is one chaos run.
type Config struct {
	// Nodes: 3 (default) or 5.
	Nodes int
	// Binary: the inference-cache binary (BuildBinary makes one).
	Binary string
	// Dir: data directories, logs and the linearizability visualization.
	Dir string
	// Counts of each fault. Partition counts are ignored (and reported as
	// skipped) when network namespaces are unavailable.
	Counts map[FaultKind]int
	// MinDuration: when the counted faults finish earlier, leader kills
	// and pauses continue until the run has lasted this long (0 = off).
	MinDuration time.Duration
	// Settle: normal operation between two faults.
	Settle time.Duration
	// FastTiming: run the servers with --fast-timing (loopback Raft
	// timings) instead of the LAN defaults.
	FastTiming bool
	// NoNetns forces loopback mode (no partitions) even as root.
	NoNetns bool
	// ServerFlags are added to every server's command line (e.g.
	// "--raft-log-level", "info" to see elections and snapshot installs).
	ServerFlags []string
	// Logger for harness progress.
	Logger *slog.Logger
}

// Runner holds the state of one run.
type Runner struct {
	cfg    Config
	c      *Cluster
	w      *Workload
	mon    *Monitor
	log    *slog.Logger
	timing faultTiming

	faults      []*FaultRec
	staleChecks int
}

// BuildBinary builds ./cmd/inference-cache of the module at root into dir
// with the chaos build tag, whose only difference is the wall-clock offset
// hook (INFERENCE_CACHE_CHAOS_CLOCK_OFFSET) the clock-skew fault uses.
func BuildBinary(root, dir string) (string, error) {
	bin := filepath.Join(dir, "inference-cache")
	cmd := exec.Command("go", "build", "-tags", "chaos", "-o", bin, "./cmd/inference-cache")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Schedule orders the faults: round robin over the kinds, so every kind
// recurs throughout the run rather than in one block.
func Schedule(counts map[FaultKind]int) []FaultKind {
	order := []FaultKind{LeaderKill, LeaderPause, IsolateLeader, GossipCut, LeaderKill, FollowerKill, IsolateFollower, ClockSkew,
		LeaderKill, Replace, SplitMinority, RaftCut, IngestFlood, LeaderKill, LeaderDiskFull, FullRestart}
	left := map[FaultKind]int{}
	total := 0
	for k, v := range counts {
		left[k] = v
		total += v
	}
	var out []FaultKind
	for len(out) < total {
		for _, k := range order {
			if left[k] > 0 {
				left[k]--
				out = append(out, k)
			}
		}
	}
	return out
}

// Run starts the cluster and the workload, injects the scheduled faults,
// heals, checks every invariant and returns the report. An error means
// the harness itself could not proceed (the report then holds what was
// measured so far).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Settle == 0 {
		cfg.Settle = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	rep := newReport()
	rep.Nodes, rep.FastTiming, rep.LoadBefore = cfg.Nodes, cfg.FastTiming, loadAvg()
	var caps faultCaps
	caps.netns = netnsFor(cfg, log, rep)
	rep.Netns = caps.netns
	opts := Options{Nodes: cfg.Nodes, Binary: cfg.Binary, Dir: cfg.Dir, FastTiming: cfg.FastTiming, Netns: caps.netns, Flags: cfg.ServerFlags, Logger: log}
	caps.diskWhy = "needs root"
	if caps.netns && cfg.Counts[LeaderDiskFull] > 0 {
		if caps.diskOK, caps.diskWhy = TmpfsAvailable(); caps.diskOK {
			opts.DiskLimit = diskLimit
		} else {
			log.Warn("chaos: full-disk faults skipped", "reason", caps.diskWhy)
		}
	}
	caps.portOK, caps.portWhy = PortCutsAvailable()
	c, err := NewCluster(ctx, opts)
	if err != nil {
		return rep, err
	}
	defer c.Close()
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return rep, err
	}
	r := newRunner(cfg, c, log)
	w, err := NewWorkload(ctx, c, r.mon)
	if err != nil {
		return rep, err
	}
	defer w.Close()
	r.w = w
	r.mon.Start(ctx, w)
	w.Start(ctx)
	start := time.Now()
	r.runFaults(ctx, rep, caps, start)
	sleepCtx(ctx, cfg.Settle)
	// Heal everything, stop the load, and check.
	healAll(c)
	w.Stop()
	r.mon.Stop()
	rep.Duration = time.Since(start)
	r.check(ctx, rep)
	rep.LoadAfter = loadAvg()
	return rep, nil
}

// faultCaps is what this machine lets the run inject: network namespaces
// (partitions), port cuts (gossip and Raft cuts), a size-limited data
// volume (full disk), with the reason when not.
type faultCaps struct {
	netns            bool
	portOK, diskOK   bool
	portWhy, diskWhy string
}

// skipReason reports whether kind cannot run under caps, and the reason
// recorded in the report ("" for the root-only faults, which are only
// counted).
func (caps faultCaps) skipReason(kind FaultKind) (bool, string) {
	switch {
	case kind.NeedsRoot() && !caps.netns:
		return true, ""
	case (kind == GossipCut || kind == RaftCut) && !caps.portOK:
		return true, caps.portWhy
	case kind == LeaderDiskFull && !caps.diskOK:
		return true, caps.diskWhy
	}
	return false, ""
}

// netnsFor reports whether the run uses network namespaces: not when the
// configuration disables them or the machine has none (the report says
// why partitions were skipped).
func netnsFor(cfg Config, log *slog.Logger, rep *Report) bool {
	if cfg.NoNetns {
		rep.PartitionsSkipped = "disabled by configuration"
		return false
	}
	ok, why := NetnsAvailable()
	if !ok {
		rep.PartitionsSkipped = why
		log.Warn("chaos: partitions skipped", "reason", why)
	}
	return ok
}

// newRunner makes the runner of cluster c with the faults' timing and a
// monitor of c.
func newRunner(cfg Config, c *Cluster, log *slog.Logger) *Runner {
	r := &Runner{cfg: cfg, c: c, log: log, timing: faultTiming{
		restartPause: 1500 * time.Millisecond, pauseFor: 4 * time.Second, partitionFor: 5 * time.Second,
		maxStaleness: 2 * time.Second, healthy: 90 * time.Second, gossipCutFor: 20 * time.Second,
		diskFullFor: 8 * time.Second, skewFor: 25 * time.Second, floodFor: 10 * time.Second,
	}}
	if cfg.FastTiming {
		r.timing.pauseFor = 2 * time.Second
	}
	r.mon = NewMonitor(c)
	return r
}

// runFaults injects the scheduled faults one after the other, each after
// the settle time, then alternates leader kills and pauses until
// MinDuration has passed since start. It stops at the first harness error
// (recorded in rep) or when ctx ends.
func (r *Runner) runFaults(ctx context.Context, rep *Report, caps faultCaps, start time.Time) {
	cfg := r.cfg
	sched := Schedule(cfg.Counts)
	for i := 0; ; i++ {
		var kind FaultKind
		switch {
		case i < len(sched):
			kind = sched[i]
		case cfg.MinDuration > 0 && time.Since(start) < cfg.MinDuration:
			kind = []FaultKind{LeaderKill, LeaderPause}[i%2]
		default:
			return
		}
		if skip, why := caps.skipReason(kind); skip {
			rep.SkippedFaults++
			if why != "" {
				rep.Skipped = append(rep.Skipped, string(kind)+": "+why)
			}
			continue
		}
		if !sleepCtx(ctx, cfg.Settle) {
			return
		}
		if !r.runFault(ctx, rep, i, kind) {
			return
		}
	}
}

// runFault injects fault i of kind and records it; it reports false after
// a harness error (recorded in rep).
func (r *Runner) runFault(ctx context.Context, rep *Report, i int, kind FaultKind) bool {
	r.log.Info("chaos: fault", "n", i+1, "kind", kind)
	f, err := r.inject(ctx, kind)
	if f != nil {
		if f.End.IsZero() {
			f.End = time.Now()
		}
		r.faults = append(r.faults, f)
		r.log.Info("chaos: fault done", "kind", kind, "target", f.Target, "failover_ms", f.FailoverMs,
			"took", f.End.Sub(f.Start).Round(time.Millisecond), "violations", len(f.Violations))
	}
	if err != nil {
		rep.HarnessError = fmt.Sprintf("fault %d (%s): %v", i+1, kind, err)
		r.log.Error("chaos: fault failed", "kind", kind, "err", err)
		return false
	}
	return true
}

// healAll heals the network, removes disk ballast and starts or resumes
// every node that is not running.
func healAll(c *Cluster) {
	if c.Netns() {
		_ = c.Network().Heal()
		_ = c.Network().HealPorts()
	}
	c.RemoveBallast()
	for _, n := range c.Nodes {
		switch s, _ := n.State(); s {
		case Paused:
			_ = c.Resume(n)
		case Down:
			_ = c.Start(n)
		}
	}
}

// loadAvg returns the output of uptime (load averages), for the report.
func loadAvg() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		b, _ := os.ReadFile("/proc/loadavg")
		return strings.TrimSpace(string(b))
	}
	return strings.TrimSpace(string(out))
}
