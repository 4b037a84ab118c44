package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// raftMetrics are fed by raftnode.Hooks (commit, apply, snapshot, restore).
type raftMetrics struct {
	commit       prometheus.Histogram
	commitCmds   prometheus.Histogram
	apply        prometheus.Histogram
	applyCmds    prometheus.Counter
	snapshot     *prometheus.HistogramVec
	snapshotSize prometheus.Gauge
	restore      *prometheus.HistogramVec
	leader       prometheus.Counter
}

func newRaftMetrics(reg *prometheus.Registry) *raftMetrics {
	r := &raftMetrics{
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "raft_commit_duration_seconds",
			Help:    "Leader: one write from submission to committed by a quorum and applied locally, seconds.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16),
		}),
		commitCmds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "raft_group_commit_commands",
			Help:    "Leader: commands carried by the group-commit log entry of each committed write.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "fsm_apply_duration_seconds",
			Help:    "Duration of one FSM apply batch, seconds.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}),
		applyCmds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "fsm_applied_commands_total",
			Help: "Commands applied by the FSM.",
		}),
		snapshot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "snapshot_persist_duration_seconds",
			Help: "Duration of writing one snapshot, by outcome (ok, error).",
			// 1 ms to ~17 min: a 20 M-residency snapshot on an overloaded
			// 2-core node took 100–165 s, past a 33 s top bucket.
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 21),
		}, []string{"outcome"}),
		snapshotSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "snapshot_persisted_size_bytes",
			Help: "Size in bytes of the last snapshot this node persisted.",
		}),
		restore: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "snapshot_restore_duration_seconds",
			Help:    "Duration of restoring the FSM from a snapshot, by outcome (ok, error).",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 21),
		}, []string{"outcome"}),
		leader: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "raft_leadership_gained_total",
			Help: "Times this node became leader.",
		}),
	}
	reg.MustRegister(r.commit, r.commitCmds, r.apply, r.applyCmds, r.snapshot, r.snapshotSize, r.restore, r.leader)
	return r
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// RaftCommit observes one committed write on the leader (raftnode
// Hooks.OnCommit).
func (m *Metrics) RaftCommit(d time.Duration, commands int) {
	if m == nil {
		return
	}
	m.raft.commit.Observe(d.Seconds())
	m.raft.commitCmds.Observe(float64(commands))
}

// FSMApply observes one FSM apply batch (Hooks.OnApply).
func (m *Metrics) FSMApply(entries, commands int, d time.Duration) {
	if m == nil {
		return
	}
	m.raft.apply.Observe(d.Seconds())
	m.raft.applyCmds.Add(float64(commands))
}

// SnapshotPersisted observes one snapshot write (Hooks.OnSnapshot).
func (m *Metrics) SnapshotPersisted(bytes int64, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.raft.snapshot.WithLabelValues(outcome(err)).Observe(d.Seconds())
	if err == nil {
		m.raft.snapshotSize.Set(float64(bytes))
	}
}

// SnapshotRestored observes one FSM restore (Hooks.OnRestore).
func (m *Metrics) SnapshotRestored(bytes int64, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.raft.restore.WithLabelValues(outcome(err)).Observe(d.Seconds())
}

// LeaderChanged counts leadership gains (Hooks.OnLeader).
func (m *Metrics) LeaderChanged(leader bool) {
	if m == nil || !leader {
		return
	}
	m.raft.leader.Inc()
}
