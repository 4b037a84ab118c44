package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The node collector exports what NodeInfo reports at scrape time: a
// node on a full disk must show up as not serving, stale with its reason,
// and with its failed appends counted.
func TestRegisterNode_HealthAndLogAppendSeries(t *testing.T) {
	cases := []struct {
		name string
		in   NodeInfo
		want string
	}{
		{"healthy", NodeInfo{State: "Follower", Serving: true, LogAppends: 10, LogAppendEntries: 25, LogAppendBytes: 4096, ApplyParallelBatches: 7, WriteFormat: 2,
			LastSnapshotIndex: 90210, LastSnapshotBytes: 416702504, SnapshotsByLogBytes: 3}, `
# HELP inferencecache_apply_parallel_batches_total Ingest batches the index applied on several apply workers (--apply-workers); restarts when a restore builds a new index.
# TYPE inferencecache_apply_parallel_batches_total counter
inferencecache_apply_parallel_batches_total 7
# HELP inferencecache_node_serving 1 when the node is ready and has no local fault (what /readyz and gRPC health report).
# TYPE inferencecache_node_serving gauge
inferencecache_node_serving 1
# HELP inferencecache_raft_log_append_failures_total Appends to the local Raft log that failed (disk full, I/O error).
# TYPE inferencecache_raft_log_append_failures_total counter
inferencecache_raft_log_append_failures_total 0
# HELP inferencecache_raft_log_appended_bytes_total Bytes of entry data written by those appends.
# TYPE inferencecache_raft_log_appended_bytes_total counter
inferencecache_raft_log_appended_bytes_total 4096
# HELP inferencecache_raft_log_appended_entries_total Log entries written by those appends.
# TYPE inferencecache_raft_log_appended_entries_total counter
inferencecache_raft_log_appended_entries_total 25
# HELP inferencecache_raft_log_appends_total Appends to the local Raft log (one bbolt transaction and fsync each).
# TYPE inferencecache_raft_log_appends_total counter
inferencecache_raft_log_appends_total 10
# HELP inferencecache_raft_write_format Log entry format this node writes: 2 (packed ingest), the only one.
# TYPE inferencecache_raft_write_format gauge
inferencecache_raft_write_format 2
# HELP inferencecache_snapshot_last_index Log index covered by the newest snapshot on disk.
# TYPE inferencecache_snapshot_last_index gauge
inferencecache_snapshot_last_index 90210
# HELP inferencecache_snapshot_last_size_bytes Size in bytes of the newest snapshot on disk.
# TYPE inferencecache_snapshot_last_size_bytes gauge
inferencecache_snapshot_last_size_bytes 4.16702504e+08
# HELP inferencecache_snapshots_by_log_bytes_total Snapshots taken because the Raft log grew past its limit since the last one: 256 MiB or twice the last snapshot, whichever is more.
# TYPE inferencecache_snapshots_by_log_bytes_total counter
inferencecache_snapshots_by_log_bytes_total 3
`},
		{"disk full", NodeInfo{State: "Follower", StaleReason: "appends to the local log are failing", LogAppends: 12, LogAppendEntries: 12, LogAppendFailures: 3}, `
# HELP inferencecache_apply_parallel_batches_total Ingest batches the index applied on several apply workers (--apply-workers); restarts when a restore builds a new index.
# TYPE inferencecache_apply_parallel_batches_total counter
inferencecache_apply_parallel_batches_total 0
# HELP inferencecache_node_serving 1 when the node is ready and has no local fault (what /readyz and gRPC health report).
# TYPE inferencecache_node_serving gauge
inferencecache_node_serving 0
# HELP inferencecache_raft_log_append_failures_total Appends to the local Raft log that failed (disk full, I/O error).
# TYPE inferencecache_raft_log_append_failures_total counter
inferencecache_raft_log_append_failures_total 3
# HELP inferencecache_raft_log_appended_bytes_total Bytes of entry data written by those appends.
# TYPE inferencecache_raft_log_appended_bytes_total counter
inferencecache_raft_log_appended_bytes_total 0
# HELP inferencecache_raft_log_appended_entries_total Log entries written by those appends.
# TYPE inferencecache_raft_log_appended_entries_total counter
inferencecache_raft_log_appended_entries_total 12
# HELP inferencecache_raft_log_appends_total Appends to the local Raft log (one bbolt transaction and fsync each).
# TYPE inferencecache_raft_log_appends_total counter
inferencecache_raft_log_appends_total 12
# HELP inferencecache_reads_stale 1 while this node's lookups are marked stale, labelled with the reason.
# TYPE inferencecache_reads_stale gauge
inferencecache_reads_stale{reason="appends to the local log are failing"} 1
# HELP inferencecache_snapshot_last_index Log index covered by the newest snapshot on disk.
# TYPE inferencecache_snapshot_last_index gauge
inferencecache_snapshot_last_index 0
# HELP inferencecache_snapshot_last_size_bytes Size in bytes of the newest snapshot on disk.
# TYPE inferencecache_snapshot_last_size_bytes gauge
inferencecache_snapshot_last_size_bytes 0
# HELP inferencecache_snapshots_by_log_bytes_total Snapshots taken because the Raft log grew past its limit since the last one: 256 MiB or twice the last snapshot, whichever is more.
# TYPE inferencecache_snapshots_by_log_bytes_total counter
inferencecache_snapshots_by_log_bytes_total 0
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := New()
			m.RegisterNode(func() NodeInfo { return c.in })
			names := []string{"inferencecache_node_serving", "inferencecache_reads_stale", "inferencecache_raft_log_appends_total",
				"inferencecache_raft_log_appended_entries_total", "inferencecache_raft_log_append_failures_total", "inferencecache_raft_write_format",
				"inferencecache_raft_log_appended_bytes_total", "inferencecache_apply_parallel_batches_total",
				"inferencecache_snapshot_last_index", "inferencecache_snapshot_last_size_bytes", "inferencecache_snapshots_by_log_bytes_total"}
			if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(c.want), names...); err != nil {
				t.Fatal(err)
			}
			if probs, err := testutil.GatherAndLint(m.Registry, names...); err != nil || len(probs) > 0 {
				t.Fatalf("lint: %v %+v", err, probs)
			}
		})
	}
}

// The picker load series carry what NodeInfo reports, the received
// reports by source and their outcomes by label.
func TestRegisterNode_PickerLoadSeries(t *testing.T) {
	m := New()
	m.RegisterNode(func() NodeInfo {
		return NodeInfo{State: "Follower", PickerReports: 40, PickerReportsFromPeers: 80, PickerReportsForwarded: 78, PickerReportsDropped: 2,
			PickerReportsStored: 110, PickerReportsIgnored: 7, PickerReportsRefused: 3, PickerReportsExpired: 4, PickerLoadEntries: 24, PickerLoadPickers: 3}
	})
	want := `
# HELP inferencecache_picker_load_entries (picker, replica) entries of picker load held in memory; reports past the node's limit are refused.
# TYPE inferencecache_picker_load_entries gauge
inferencecache_picker_load_entries 24
# HELP inferencecache_picker_load_pickers Pickers whose load report this node holds.
# TYPE inferencecache_picker_load_pickers gauge
inferencecache_picker_load_pickers 3
# HELP inferencecache_picker_load_reports_expired_total Pickers whose load report expired (2 of their intervals without a new one) and was dropped.
# TYPE inferencecache_picker_load_reports_expired_total counter
inferencecache_picker_load_reports_expired_total 4
# HELP inferencecache_picker_load_reports_forward_dropped_total Picker load reports this node did not pass on to a peer: its queue to that peer was full or the call failed.
# TYPE inferencecache_picker_load_reports_forward_dropped_total counter
inferencecache_picker_load_reports_forward_dropped_total 2
# HELP inferencecache_picker_load_reports_forwarded_total Picker load reports this node passed on to another node (one per peer reached).
# TYPE inferencecache_picker_load_reports_forwarded_total counter
inferencecache_picker_load_reports_forwarded_total 78
# HELP inferencecache_picker_load_reports_received_total Picker load reports this node received (contract §5.11), by source: picker (sent to this node) or node (passed on by another node).
# TYPE inferencecache_picker_load_reports_received_total counter
inferencecache_picker_load_reports_received_total{source="node"} 80
inferencecache_picker_load_reports_received_total{source="picker"} 40
# HELP inferencecache_picker_load_reports_total Picker load reports this node received, by outcome: stored (replaced the picker's report), ignored (older than the one held), refused (invalid, or the store full).
# TYPE inferencecache_picker_load_reports_total counter
inferencecache_picker_load_reports_total{outcome="ignored"} 7
inferencecache_picker_load_reports_total{outcome="refused"} 3
inferencecache_picker_load_reports_total{outcome="stored"} 110
`
	names := []string{"inferencecache_picker_load_entries", "inferencecache_picker_load_pickers", "inferencecache_picker_load_reports_expired_total",
		"inferencecache_picker_load_reports_forward_dropped_total", "inferencecache_picker_load_reports_forwarded_total",
		"inferencecache_picker_load_reports_received_total", "inferencecache_picker_load_reports_total"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}
