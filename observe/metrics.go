package observe

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds every counter of the observation path, per engine. Engine-level series carry the
// label engine=<the engine's configured replica_id>. Create one with
// NewMetrics and share it between subscribers of one process.
type Metrics struct {
	Batches            *prometheus.CounterVec // engine batches applied
	EngineEvents       *prometheus.CounterVec // engine events decoded, by kind
	DecodeErrors       *prometheus.CounterVec // payloads or frames that are not a batch
	UnknownEvents      *prometheus.CounterVec // events with a tag this version does not know
	Restarts           *prometheus.CounterVec // engine restarts (seq went backwards)
	Gaps               *prometheus.CounterVec // seq gaps detected
	Replays            *prometheus.CounterVec // replays, by outcome
	Resumes            *prometheus.CounterVec // stream starts from a cluster-held position, by outcome
	Duplicates         *prometheus.CounterVec // batches dropped because seq <= last applied
	Clears             *prometheus.CounterVec // replica clears sent, by reason
	UnknownParent      *prometheus.CounterVec // stores dropped: parent hash unknown
	TokenMismatch      *prometheus.CounterVec // stores rejected: len(token_ids) != blocks × block_size
	BlockSizeMismatch  *prometheus.CounterVec // stores rejected: block_size differs from the config (loud)
	IgnoredGroup       *prometheus.CounterVec // events of a KV group other than 0
	IgnoredMedium      *prometheus.CounterVec // events of a medium not configured
	IgnoredLocality    *prometheus.CounterVec // events of blocks the engine reports REMOTE
	NotIndexedContent  *prometheus.CounterVec // stored blocks whose hash mixes in content beyond token ids (multimodal, prompt embeds)
	UnknownRemovals    *prometheus.CounterVec // removed hashes never stored (or already gone)
	Overflows          *prometheus.CounterVec // replicas cleared because their hash map hit its bound
	Reconnects         *prometheus.CounterVec // SUB socket (re)connections
	StatsScrapes       *prometheus.CounterVec // metrics_url scrapes, by outcome
	IngestBatches      *prometheus.CounterVec // ingest requests acknowledged, by outcome
	IngestEvents       prometheus.Counter     // block events acknowledged by the cluster
	IngestRejected     prometheus.Counter     // block events the cluster rejected (with a reason)
	IngestClockRejects prometheus.Counter     // of those, events whose observed_at_ms ran over 5 min ahead of the server clock
	IngestRetries      prometheus.Counter     // ingest attempts that failed and were retried
	IngestQueue        prometheus.Gauge       // block events queued, not yet acknowledged
	IngestLag          prometheus.Gauge       // seconds the oldest unacknowledged event has waited
	StatsReports       *prometheus.CounterVec // ReportReplicaStats calls, by outcome
	BlockEventsEmitted *prometheus.CounterVec // BlockEvents produced, by kind (STORED, REMOVED, CLEARED)

	// Listen mode (listen.go). Unknown publishers have no engine label:
	// their topics are unbounded, so they are counted in one series and
	// logged instead.
	ListenUnknownMessages prometheus.Counter // listen-socket messages whose topic matches no engine entry
	ListenUnknownTopics   prometheus.Counter // distinct such topics, each logged once (at most 1,024 per listener)
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered, useful in tests). It panics if reg already holds them, like
// prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "inferencecache", "subscriber"
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, append([]string{"engine"}, labels...))
	}
	m := &Metrics{
		Batches:            cv("batches_total", "Engine event batches applied."),
		EngineEvents:       cv("engine_events_total", "Engine KV events decoded, by engine tag.", "kind"),
		DecodeErrors:       cv("decode_errors_total", "Engine messages that could not be decoded (the batch is treated as lost)."),
		UnknownEvents:      cv("unknown_events_total", "Engine events with an unknown tag, skipped."),
		Restarts:           cv("engine_restarts_total", "Engine restarts detected (sequence went backwards); the replica is cleared."),
		Gaps:               cv("seq_gaps_total", "Sequence gaps detected in the live stream."),
		Resumes:            cv("stream_resumes_total", "Engine streams started or reconnected from a position (contract §6.11), by outcome: kept (the engine's replay proved the same process; hints kept), kept_unverified (no replay endpoint, the live seq went on; hints kept until a removal the subscriber cannot translate), cleared (a sequence reset, or missed events with no replay).", "outcome"),
		Replays:            cv("replays_total", "Replay requests, by outcome (complete, incomplete, failed).", "outcome"),
		Duplicates:         cv("duplicate_batches_total", "Batches dropped because their seq was already applied."),
		Clears:             cv("replica_clears_total", "CLEARED events sent, by reason.", "reason"),
		UnknownParent:      cv("unknown_parent_total", "BlockStored events dropped because the parent block hash is unknown."),
		TokenMismatch:      cv("token_length_mismatch_total", "BlockStored events rejected: len(token_ids) != len(block_hashes) x block_size."),
		BlockSizeMismatch:  cv("block_size_mismatch_total", "BlockStored events rejected: block_size differs from the configured block size. Non-zero means every lookup for this engine would miss: fix the config."),
		IgnoredGroup:       cv("ignored_group_total", "Events of a KV-cache group other than the main attention group (group_idx != 0), ignored."),
		IgnoredMedium:      cv("ignored_medium_total", "Events of a storage medium not configured (default: only GPU), ignored."),
		IgnoredLocality:    cv("ignored_locality_total", "Events of blocks the engine reports as REMOTE (not resident on it), ignored."),
		NotIndexedContent:  cv("not_indexed_content_blocks_total", "Stored blocks not indexed because their engine hash mixes in content that is not in token_ids (multimodal items, prompt embeddings, unknown extra keys), or they chain after such a block."),
		UnknownRemovals:    cv("unknown_removals_total", "Removed block hashes that were not known, ignored."),
		Overflows:          cv("hash_map_overflows_total", "Replicas cleared because their engine-hash map reached its bound."),
		Reconnects:         cv("connects_total", "Connections of the SUB socket to the engine (first and later)."),
		StatsScrapes:       cv("stats_scrapes_total", "Scrapes of the engine metrics_url, by outcome (ok, absent, error).", "outcome"),
		StatsReports:       cv("stats_reports_total", "ReportReplicaStats calls, by outcome (ok; rejected: the cluster refused the entry; error).", "outcome"),
		BlockEventsEmitted: cv("block_events_total", "BlockEvents produced for ingest, by kind.", "kind"),
		IngestBatches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ingest_requests_total",
			Help: "Ingest requests, by outcome (ok, error)."}, []string{"outcome"}),
		IngestEvents: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ingest_events_total",
			Help: "Block events acknowledged by the cluster (accepted or rejected)."}),
		IngestRejected: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ingest_rejected_total",
			Help: "Block events the cluster rejected with a reason (not retried)."}),
		IngestClockRejects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ingest_rejected_ahead_of_clock_total",
			Help: "Block events the cluster rejected because their observed_at_ms (the engine's event time) was over 5 minutes ahead of the server clock; included in ingest_rejected_total. Non-zero means an engine's or a server's clock is wrong: fix NTP, the events are lost."}),
		IngestRetries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ingest_retries_total",
			Help: "Ingest attempts that failed and were retried with the same request id."}),
		IngestQueue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "ingest_queue_events",
			Help: "Block events queued and not yet acknowledged."}),
		IngestLag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "ingest_lag_seconds",
			Help: "Age of the oldest block event not yet acknowledged by the cluster (0 when the queue is empty)."}),
		ListenUnknownMessages: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "listen_unknown_messages_total",
			Help: "Messages on the listen socket whose topic matches no engine entry (topic or pod), dropped. Non-zero means an engine connects that the config does not list, or its topic is not the configured one."}),
		ListenUnknownTopics: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "listen_unknown_topics_total",
			Help: "Distinct unknown topics seen on the listen socket, each logged once at WARN; at most 1,024 are remembered and counted until the socket is rebound (listen or topic_pattern changed)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Batches, m.EngineEvents, m.DecodeErrors, m.UnknownEvents, m.Restarts, m.Gaps, m.Replays,
			m.Duplicates, m.Resumes, m.Clears, m.UnknownParent, m.TokenMismatch, m.BlockSizeMismatch, m.IgnoredGroup,
			m.IgnoredMedium, m.IgnoredLocality, m.NotIndexedContent, m.UnknownRemovals, m.Overflows, m.Reconnects, m.StatsScrapes, m.StatsReports,
			m.BlockEventsEmitted, m.IngestBatches, m.IngestEvents, m.IngestRejected, m.IngestClockRejects, m.IngestRetries,
			m.IngestQueue, m.IngestLag, m.ListenUnknownMessages, m.ListenUnknownTopics)
	}
	return m
}

// engineMetrics are one engine's series, resolved once so the hot path does
// no label lookups.
type engineMetrics struct {
	batches, decodeErrors, unknownEvents, restarts, gaps, duplicates prometheus.Counter
	stored, removed, cleared                                         prometheus.Counter
	unknownParent, tokenMismatch, blockSizeMismatch                  prometheus.Counter
	ignoredGroup, ignoredMedium, unknownRemovals, overflows          prometheus.Counter
	ignoredLocality, notIndexedContent                               prometheus.Counter
	reconnects                                                       prometheus.Counter
	replayComplete, replayIncomplete, replayFailed                   prometheus.Counter
	resumes                                                          *prometheus.CounterVec
	emitStored, emitRemoved, emitCleared                             prometheus.Counter
	clears                                                           *prometheus.CounterVec
	engine                                                           string
	scrapes, reports                                                 *prometheus.CounterVec
}

func (m *Metrics) forEngine(engine string) *engineMetrics {
	return &engineMetrics{
		engine:            engine,
		batches:           m.Batches.WithLabelValues(engine),
		decodeErrors:      m.DecodeErrors.WithLabelValues(engine),
		unknownEvents:     m.UnknownEvents.WithLabelValues(engine),
		restarts:          m.Restarts.WithLabelValues(engine),
		gaps:              m.Gaps.WithLabelValues(engine),
		duplicates:        m.Duplicates.WithLabelValues(engine),
		stored:            m.EngineEvents.WithLabelValues(engine, "BlockStored"),
		removed:           m.EngineEvents.WithLabelValues(engine, "BlockRemoved"),
		cleared:           m.EngineEvents.WithLabelValues(engine, "AllBlocksCleared"),
		unknownParent:     m.UnknownParent.WithLabelValues(engine),
		tokenMismatch:     m.TokenMismatch.WithLabelValues(engine),
		blockSizeMismatch: m.BlockSizeMismatch.WithLabelValues(engine),
		ignoredGroup:      m.IgnoredGroup.WithLabelValues(engine),
		ignoredMedium:     m.IgnoredMedium.WithLabelValues(engine),
		ignoredLocality:   m.IgnoredLocality.WithLabelValues(engine),
		notIndexedContent: m.NotIndexedContent.WithLabelValues(engine),
		unknownRemovals:   m.UnknownRemovals.WithLabelValues(engine),
		overflows:         m.Overflows.WithLabelValues(engine),
		reconnects:        m.Reconnects.WithLabelValues(engine),
		replayComplete:    m.Replays.WithLabelValues(engine, "complete"),
		replayIncomplete:  m.Replays.WithLabelValues(engine, "incomplete"),
		replayFailed:      m.Replays.WithLabelValues(engine, "failed"),
		emitStored:        m.BlockEventsEmitted.WithLabelValues(engine, "STORED"),
		emitRemoved:       m.BlockEventsEmitted.WithLabelValues(engine, "REMOVED"),
		emitCleared:       m.BlockEventsEmitted.WithLabelValues(engine, "CLEARED"),
		resumes:           m.Resumes.MustCurryWith(prometheus.Labels{"engine": engine}),
		clears:            m.Clears.MustCurryWith(prometheus.Labels{"engine": engine}),
		scrapes:           m.StatsScrapes.MustCurryWith(prometheus.Labels{"engine": engine}),
		reports:           m.StatsReports.MustCurryWith(prometheus.Labels{"engine": engine}),
	}
}
