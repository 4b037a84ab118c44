package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// NodeInfo is what the node reports at scrape time: index sizes (contract §10.1)
// and Raft state (contract §10.1).
type NodeInfo struct {
	// Index sizes.
	Partitions, Blocks, Residencies, Replicas int
	// State is "Leader", "Follower", "Candidate" or "Shutdown".
	State string
	Term  uint64
	// AppliedIndex is the last index the FSM finished applying;
	// CommitIndex and LastLogIndex are Raft's.
	AppliedIndex, CommitIndex, LastLogIndex uint64
	// LastLeaderContactMs: ms since the last leader contact (0 on the
	// leader).
	LastLeaderContactMs uint64
	// Voters counts the voting members of the configuration.
	Voters int
	// LastSnapshotIndex and LastSnapshotBytes describe the newest snapshot
	// on disk (0 when none or unknown).
	LastSnapshotIndex, LastSnapshotBytes uint64
	// Serving is raftnode.Node.Serving (readiness). StaleReason is why
	// this node's reads are stale ("" when fresh: contract §8.4).
	Serving     bool
	StaleReason string
	// LogAppends, LogAppendEntries, LogAppendFailures: appends to the
	// local Raft log (one bbolt transaction each), the entries they
	// wrote, and the appends that failed (disk full, I/O error), since
	// start.
	LogAppends, LogAppendEntries, LogAppendFailures uint64
	// LogAppendBytes: entry data bytes those appends wrote, since start
	// (raftnode also snapshots on this log's growth: SnapshotLogBytes).
	LogAppendBytes uint64
	// SnapshotsByLogBytes: snapshots this node took because its log grew
	// past the log-growth limit (raftnode.Metrics.SnapshotsByLogBytes),
	// since start.
	SnapshotsByLogBytes uint64
	// ApplyParallelBatches: ingest batches applied by several apply
	// workers since the index was built (index.ParallelBatches; a restore
	// builds a new index, so the counter restarts).
	ApplyParallelBatches uint64
	// ClockOffsetToLeader: the leader's clock minus this node's, in
	// seconds, measured over gossip probes; Known false = not measured
	// (the leader, or no probe answered yet): not exported.
	ClockOffsetToLeader      float64
	ClockOffsetToLeaderKnown bool
	// ClockCorrection: seconds this node adds to its own clock because it
	// is off the cluster's median clock (raftnode Node.ClockCorrection);
	// 0 when it agrees.
	ClockCorrection float64
	// ExpireClamped: expire commands this node, as leader, bounded because
	// its clock ran ahead of the newest observation (raftnode
	// Metrics.ExpireClamped), since start.
	ExpireClamped uint64
	// WriteFormat is the log entry format the node writes (raftnode
	// Status.WriteFormat: 2, packed ingest). 0 = unknown, not exported.
	WriteFormat uint32
	// The pickers' load reports (contract §5.11), since start:
	// PickerReports were sent to this node by pickers,
	// PickerReportsFromPeers passed on to it by other nodes;
	// PickerReportsForwarded it passed on (one per peer reached),
	// PickerReportsDropped it could not pass on (a peer's queue full or
	// its call failed). Of all it received, PickerReportsStored replaced
	// a picker's report, PickerReportsIgnored were older than the one
	// held, PickerReportsRefused were invalid or found the store full;
	// PickerReportsExpired counts pickers whose report expired.
	PickerReports, PickerReportsFromPeers, PickerReportsForwarded, PickerReportsDropped   uint64
	PickerReportsStored, PickerReportsIgnored, PickerReportsRefused, PickerReportsExpired uint64
	// PickerLoadEntries is the (picker, replica) entries held now (bounded
	// by the node's limit, 65,536 by default), PickerLoadPickers the
	// pickers.
	PickerLoadEntries, PickerLoadPickers int
	// The provisional residencies (contract §5.12), since start:
	// PicksPushes were sent to this node by pickers, PicksFromPeers passed
	// on to it by other nodes; PicksForwarded it passed on (one per peer
	// reached), PicksDropped it could not pass on. PicksRefused pushes
	// were invalid or found the store full. ProvisionalPicks counts picks
	// by how they came and went (added, removed, confirmed, expired,
	// ignored).
	PicksPushes, PicksFromPeers, PicksForwarded, PicksDropped, PicksRefused uint64
	ProvisionalPicks                                                        map[string]uint64
	// ProvisionalBlocks is the (pick, block) entries held now (bounded by
	// the node's limit, 1,048,576 by default), ProvisionalHeld the picks.
	ProvisionalBlocks, ProvisionalHeld int
	// The pickers' turns at this node (contract §5.13), since start:
	// taken by lookups, settled by load reports, lapsed unsettled,
	// refused past the table's bound; outstanding and waiting now.
	TurnsTaken, TurnsSettled, TurnsLapsed, TurnsRefused uint64
	TurnsOutstanding, TurnsWaiting                      int
}

// States lists the values of NodeInfo.State, each exported as one series of
// inferencecache_raft_state (1 for the current state, 0 for the others).
var States = []string{"Leader", "Follower", "Candidate", "Shutdown"}

type nodeCollector struct {
	info func() NodeInfo
	d    map[string]*prometheus.Desc
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// RegisterNode registers a collector that calls info at every scrape and
// exports index sizes and Raft state. A panic in info is recovered (the
// scrape then lacks those series).
func (m *Metrics) RegisterNode(info func() NodeInfo) {
	if m == nil {
		return
	}
	c := &nodeCollector{info: info, d: map[string]*prometheus.Desc{
		"partitions":    desc("index_partitions", "Partitions holding live entries."),
		"blocks":        desc("index_blocks", "Distinct blocks held across partitions."),
		"residencies":   desc("index_residencies", "(block, replica) pairs held; bounded by maxResidencies."),
		"replicas":      desc("index_replicas", "Replicas with residencies or stats."),
		"state":         desc("raft_state", "1 for this node's current Raft state.", "state"),
		"term":          desc("raft_term", "Current Raft term."),
		"applied":       desc("raft_applied_index", "Last log index the FSM finished applying."),
		"commit":        desc("raft_commit_index", "Raft commit index."),
		"lastlog":       desc("raft_last_log_index", "Last index in the Raft log."),
		"contact":       desc("raft_last_leader_contact_seconds", "Seconds since the last contact with a leader (0 on the leader)."),
		"voters":        desc("raft_voters", "Voting members in the Raft configuration."),
		"snapshotIndex": desc("snapshot_last_index", "Log index covered by the newest snapshot on disk."),
		"snapshotBytes": desc("snapshot_last_size_bytes", "Size in bytes of the newest snapshot on disk."),
		"serving":       desc("node_serving", "1 when the node is ready and has no local fault (what /readyz and gRPC health report)."),
		"stale":         desc("reads_stale", "1 while this node's lookups are marked stale, labelled with the reason.", "reason"),
		"appends":       desc("raft_log_appends_total", "Appends to the local Raft log (one bbolt transaction and fsync each)."),
		"appendEntries": desc("raft_log_appended_entries_total", "Log entries written by those appends."),
		"appendFails":   desc("raft_log_append_failures_total", "Appends to the local Raft log that failed (disk full, I/O error)."),
		"appendBytes":   desc("raft_log_appended_bytes_total", "Bytes of entry data written by those appends."),
		"clockOffset":   desc("clock_offset_to_leader_seconds", "The leader's clock minus this node's, measured over gossip probes (not exported on the leader). Expiry and lookups are bounded against a clock that runs ahead; keep the servers on NTP."),
		"clockFix":      desc("clock_correction_seconds", "Seconds this node adds to its own wall clock because it is more than 5 s off the median clock of the cluster (at least three clocks); 0 when it agrees. Non-zero means: fix this server's NTP."),
		"expireClamped": desc("expire_clock_clamped_total", "Expire commands this node, as leader, bounded to the newest observation in the index plus a minute because its clock was further ahead (check the clock)."),
		"snapByBytes":   desc("snapshots_by_log_bytes_total", "Snapshots taken because the Raft log grew past its limit since the last one: 256 MiB or twice the last snapshot, whichever is more."),
		"parallel":      desc("apply_parallel_batches_total", "Ingest batches the index applied on several apply workers (--apply-workers); restarts when a restore builds a new index."),
		"writeFormat":   desc("raft_write_format", "Log entry format this node writes: 2 (packed ingest), the only one."),
		"pickerRecv":    desc("picker_load_reports_received_total", "Picker load reports this node received (contract §5.11), by source: picker (sent to this node) or node (passed on by another node).", "source"),
		"pickerOut":     desc("picker_load_reports_total", "Picker load reports this node received, by outcome: stored (replaced the picker's report), ignored (older than the one held), refused (invalid, or the store full).", "outcome"),
		"pickerFwd":     desc("picker_load_reports_forwarded_total", "Picker load reports this node passed on to another node (one per peer reached)."),
		"pickerDrop":    desc("picker_load_reports_forward_dropped_total", "Picker load reports this node did not pass on to a peer: its queue to that peer was full or the call failed."),
		"pickerExp":     desc("picker_load_reports_expired_total", "Pickers whose load report expired (2 of their intervals without a new one) and was dropped."),
		"pickerEntries": desc("picker_load_entries", "(picker, replica) entries of picker load held in memory; reports past the node's limit are refused."),
		"pickers":       desc("picker_load_pickers", "Pickers whose load report this node holds."),
		"picksRecv":     desc("provisional_pushes_received_total", "Provisional picks pushes this node received (contract §5.12), by source: picker (sent to this node) or node (passed on by another node).", "source"),
		"picksRefused":  desc("provisional_pushes_refused_total", "Provisional picks pushes refused: invalid, or the store full."),
		"picksFwd":      desc("provisional_pushes_forwarded_total", "Provisional picks pushes this node passed on to another node (one per peer reached)."),
		"picksDrop":     desc("provisional_pushes_forward_dropped_total", "Provisional picks pushes this node did not pass on to a peer: its queue full or the call failed (the picker's next full state repairs it)."),
		"picksOut":      desc("provisional_picks_total", "Provisional residencies by outcome: added, removed (by their picker), confirmed (the engines' events reached the index), expired (max age), ignored (held, removed or superseded already).", "outcome"),
		"provBlocks":    desc("provisional_blocks", "(pick, block) entries of provisional residencies held in memory; pushes past the node's limit are refused."),
		"provPicks":     desc("provisional_picks", "Provisional residencies (picks) this node holds."),
		"turns":         desc("turns_total", "Pickers' turns at this node (contract §5.13) by outcome: taken (a lookup's), settled (by a load report the picker sent alone or in a picks push), lapsed (unsettled past the hold), refused (past the table's bound).", "outcome"),
		"turnsOut":      desc("turns_outstanding", "Pickers' turns taken at this node and not yet settled or lapsed."),
		"turnsWaiting":  desc("turns_waiting", "Lookups waiting for their turn at this node."),
	}}
	m.Registry.MustRegister(c)
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() { _ = recover() }()
	in := c.info()
	g := func(k string, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(c.d[k], prometheus.GaugeValue, v, lv...)
	}
	g("partitions", float64(in.Partitions))
	g("blocks", float64(in.Blocks))
	g("residencies", float64(in.Residencies))
	g("replicas", float64(in.Replicas))
	for _, s := range States {
		v := 0.0
		if s == in.State {
			v = 1
		}
		g("state", v, s)
	}
	g("term", float64(in.Term))
	g("applied", float64(in.AppliedIndex))
	g("commit", float64(in.CommitIndex))
	g("lastlog", float64(in.LastLogIndex))
	g("contact", float64(in.LastLeaderContactMs)/1000)
	g("voters", float64(in.Voters))
	g("snapshotIndex", float64(in.LastSnapshotIndex))
	g("snapshotBytes", float64(in.LastSnapshotBytes))
	serving := 0.0
	if in.Serving {
		serving = 1
	}
	g("serving", serving)
	if in.StaleReason != "" {
		g("stale", 1, in.StaleReason)
	}
	cnt := func(k string, v uint64) {
		ch <- prometheus.MustNewConstMetric(c.d[k], prometheus.CounterValue, float64(v))
	}
	cnt("appends", in.LogAppends)
	cnt("appendEntries", in.LogAppendEntries)
	cnt("appendFails", in.LogAppendFailures)
	cnt("appendBytes", in.LogAppendBytes)
	cnt("snapByBytes", in.SnapshotsByLogBytes)
	cnt("expireClamped", in.ExpireClamped)
	if in.ClockOffsetToLeaderKnown {
		g("clockOffset", in.ClockOffsetToLeader)
	}
	g("clockFix", in.ClockCorrection)
	cnt("parallel", in.ApplyParallelBatches)
	if in.WriteFormat != 0 {
		g("writeFormat", float64(in.WriteFormat))
	}
	ch <- prometheus.MustNewConstMetric(c.d["pickerRecv"], prometheus.CounterValue, float64(in.PickerReports), "picker")
	ch <- prometheus.MustNewConstMetric(c.d["pickerRecv"], prometheus.CounterValue, float64(in.PickerReportsFromPeers), "node")
	for o, v := range map[string]uint64{"stored": in.PickerReportsStored, "ignored": in.PickerReportsIgnored, "refused": in.PickerReportsRefused} {
		ch <- prometheus.MustNewConstMetric(c.d["pickerOut"], prometheus.CounterValue, float64(v), o)
	}
	cnt("pickerFwd", in.PickerReportsForwarded)
	cnt("pickerDrop", in.PickerReportsDropped)
	cnt("pickerExp", in.PickerReportsExpired)
	g("pickerEntries", float64(in.PickerLoadEntries))
	g("pickers", float64(in.PickerLoadPickers))
	ch <- prometheus.MustNewConstMetric(c.d["picksRecv"], prometheus.CounterValue, float64(in.PicksPushes), "picker")
	ch <- prometheus.MustNewConstMetric(c.d["picksRecv"], prometheus.CounterValue, float64(in.PicksFromPeers), "node")
	cnt("picksRefused", in.PicksRefused)
	cnt("picksFwd", in.PicksForwarded)
	cnt("picksDrop", in.PicksDropped)
	for _, o := range []string{"added", "removed", "confirmed", "expired", "ignored"} {
		ch <- prometheus.MustNewConstMetric(c.d["picksOut"], prometheus.CounterValue, float64(in.ProvisionalPicks[o]), o)
	}
	g("provBlocks", float64(in.ProvisionalBlocks))
	g("provPicks", float64(in.ProvisionalHeld))
	for o, v := range map[string]uint64{"taken": in.TurnsTaken, "settled": in.TurnsSettled, "lapsed": in.TurnsLapsed, "refused": in.TurnsRefused} {
		ch <- prometheus.MustNewConstMetric(c.d["turns"], prometheus.CounterValue, float64(v), o)
	}
	g("turnsOut", float64(in.TurnsOutstanding))
	g("turnsWaiting", float64(in.TurnsWaiting))
}
