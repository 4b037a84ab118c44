package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/turns"
)

// Visibility says when the events of earlier requests must be visible to
// a hint strategy's lookup (see the package doc).
type Visibility string

// Visibility modes.
const (
	// VisibilityDelay, the realistic time model and the default: an
	// engine publishes a request's KV events when its prefill ends, and a
	// lookup at virtual time t sees exactly the events published before
	// t − EventDelay, applied on every node.
	VisibilityDelay Visibility = "delay"
	// VisibilityTimestamp: events of requests with an earlier trace
	// timestamp are applied on every node before the lookup; requests
	// with the same timestamp are concurrent.
	VisibilityTimestamp Visibility = "timestamp"
	// VisibilityRequest: events of every earlier request are applied
	// before the lookup.
	VisibilityRequest Visibility = "request"
)

// Config is one bench run.
type Config struct {
	// Trace is the request trace (required).
	Trace *Trace
	// Fleet is the simulated fleet, the same for every strategy.
	Fleet FleetConfig
	// Strategies to run, in order (default AllStrategies).
	Strategies []string
	// Addrs are the cluster's gRPC addresses (required when a hint
	// strategy runs).
	Addrs []string
	// Client carries the TLS and bearer token (client.Config.TLS,
	// Credentials) of every connection to the cluster, for a secured one
	// (docs/security.md; the admin token: the bench reads status, sets the
	// policy, writes and looks up). Its addresses and timeouts are the
	// bench's own.
	Client client.Config
	// Encoding of the engines' KV-event batches (default positional).
	Encoding Encoding
	// Visibility of KV events to lookups (default VisibilityDelay).
	Visibility Visibility
	// EventDelay is the virtual delay from an event's publication to its
	// visibility in VisibilityDelay (default DefaultEventDelay).
	EventDelay time.Duration
	// Gateways is the number of gateway instances the requests are split
	// over, round robin (default 1); each keeps its own router state.
	Gateways int
	// ReportInterval is how often, in virtual time, each gateway of
	// lookuproute-sdk reports its in-flight load (its LoadShare's
	// interval, 10 ms to 1 min), besides the report its picks pushes
	// carry; the load store expires a picker's load 2 intervals after its
	// last report (default DefaultReportInterval). Its picks' full state
	// goes every client.DefaultFullStateInterval.
	ReportInterval time.Duration
	// ShareDelay is the virtual delay from a lookuproute-sdk gateway's
	// push (a pick, a first token, an end) to its visibility in every
	// node's lookups: 0 (the default) draws each push's from
	// MeasuredShareDelay, the live system's; above 0 every push takes it;
	// negative is refused.
	ShareDelay time.Duration
	// TurnWait bounds a lookuproute-sdk gateway's wait for its turn at the
	// node that orders the picks of several gateways (contract §5.13;
	// default turns.DefaultWait, negative: no turns, an ablation).
	TurnWait time.Duration
	// NoProvisional turns the gateway core's provisional residencies off
	// for lookuproute-sdk and picker-indexer (its local table and the
	// shared picks; an ablation).
	NoProvisional bool
	// DynamoSyncDelay is dynamo-sync-nats's delay from a router replica's
	// routing event to the others (default DefaultDynamoSyncDelay).
	DynamoSyncDelay time.Duration
	// Picker configures lookuproute-sdk's picker (and picker-indexer's);
	// nil = client.DefaultPickerConfig(). Its Seed is set per gateway.
	Picker *client.PickerConfig
	// Seed drives a replay's randomness: the random strategy, the peers'
	// tie-breaks (dynamo, llm-d), the engines' hash seeds, the gateways'
	// picker seeds and the share delays drawn from MeasuredShareDelay.
	// The trace is the caller's.
	Seed uint64
	// Runs replays each strategy this many times (default 1, at most
	// MaxRuns), seeded Seed, Seed+1, …, on the same trace, and reports
	// each figure's median over the runs, every run's under Result.Runs.
	Runs int
	// ScrapeInterval is how often, in virtual time, the engines' /metrics
	// change (the scrape llm-d reads; default DefaultScrapeInterval).
	ScrapeInterval time.Duration
	// SubscriberScrape is how often, in wall time, the cluster's
	// subscriber scrapes them (default DefaultSubscriberScrape).
	SubscriberScrape time.Duration
	// LookupTimeout is the gateway's LookupRoute budget (client SDK;
	// default 100ms). Past it the lookup fails open to NO_HINT.
	LookupTimeout time.Duration
	// V2NoTenantHot and V2NoAffinity turn the TENANT_HOT and
	// AFFINITY_HINT fallbacks off for lookuproute-v2 (an ablation; the
	// default keeps both, as the default policy does).
	V2NoTenantHot, V2NoAffinity bool
	// Logger (default: discard).
	Logger *slog.Logger
	// Progress, when set, is called every few dozen requests and at the
	// end of each strategy.
	Progress func(strategy string, done, total int)
}

// Defaults of Config.
const (
	// DefaultLookupTimeout is the gateway's default LookupRoute budget.
	DefaultLookupTimeout = 100 * time.Millisecond
	// DefaultEventDelay is the default virtual delay from a KV event's
	// publication to its visibility to lookups.
	DefaultEventDelay = 50 * time.Millisecond
	// DefaultReportInterval is the default virtual interval of the
	// pickers' full-state reports, the SDK reporter's default.
	DefaultReportInterval = 50 * time.Millisecond
	// DesignShareDelay is the design's bound on a push's delay (a pick
	// visible to another gateway's lookup within 5 ms at p99 on
	// loopback), the pessimistic fixed --share-delay of EVALUATION.md's
	// sensitivity rows.
	DesignShareDelay = 5 * time.Millisecond
	// DefaultSubscriberScrape is the default wall-time scrape interval of
	// the cluster's subscriber in a bench run: short, because the bench
	// compresses virtual time many times over.
	DefaultSubscriberScrape = 20 * time.Millisecond
)

// Result is one strategy's outcome.
type Result struct {
	// Name is the strategy.
	Name string
	// GatewaysShared reports whether the strategy's gateway instances
	// shared their in-flight load (SharesLoad, with several gateways).
	GatewaysShared bool
	// PromptTokens and CachedTokens sum the trace's prompts and the
	// prefixes found cached on the chosen engines.
	PromptTokens, CachedTokens int64
	// TokenHitRate = CachedTokens / PromptTokens.
	TokenHitRate float64
	// FractionOfIdeal = TokenHitRate / the trace's ideal bound.
	FractionOfIdeal float64
	// PerEngine are the requests each engine served.
	PerEngine []int64
	// MaxOverMeanRequests = max(PerEngine) / mean(PerEngine).
	MaxOverMeanRequests float64
	// TTFTModelP50Ms, TTFTModelP90Ms and TTFTModelP99Ms are percentiles
	// of the modelled TTFT, TTFTModelMeanMs its mean.
	TTFTModelP50Ms, TTFTModelP90Ms, TTFTModelP99Ms, TTFTModelMeanMs float64
	// TTFTMs is every request's modelled TTFT, sorted (for plots).
	TTFTMs []float64
	// LookupP50Us and LookupP99Us are LookupRoute latency percentiles as
	// seen by the gateway (0 for strategies that do not ask).
	LookupP50Us, LookupP99Us float64
	// ReasonCodes counts the lookups' reason codes (empty for strategies
	// that do not ask).
	ReasonCodes map[string]int64
	// Wall is the replay's wall time.
	Wall time.Duration
	// Barriers counts visibility waits, BarrierWall their total time,
	// BarrierTimeouts those that gave up (stats syncs included).
	Barriers, BarrierTimeouts int
	BarrierWall               time.Duration
	// StatsSyncs counts the scrapes, at a virtual scrape tick, of the
	// engines whose metrics changed (lookuproute-sdk with several
	// gateways), StatsSyncWall their time.
	StatsSyncs    int
	StatsSyncWall time.Duration
	// FailOpen counts lookups the client answered NO_HINT itself (error
	// or timeout); UnknownReplica hints naming a replica outside the fleet.
	FailOpen, UnknownReplica int64
	// Published counts block hashes the engines published (hint
	// strategies only; the others do not run the observation path).
	Published int64
	// Policy describes the CachePolicy used (hint strategies).
	Policy string
	// Runs are the figures of each run when the strategy was replayed
	// several times (Config.Runs > 1), in seed order; the figures above
	// are then their medians (medianOfRuns). Empty for one run.
	Runs []RunFigures
}

// Report is a whole run.
type Report struct {
	// Trace is the trace's name.
	Trace string
	// Requests is the number of requests replayed.
	Requests int
	// IdealTokenHitRate is the trace's ideal bound (Trace.IdealHitRate).
	IdealTokenHitRate float64
	// DistinctBlocks and SpanMs describe the trace.
	DistinctBlocks int
	SpanMs         int64
	// Fleet, Encoding, Visibility, EventDelay, Gateways: the settings
	// used.
	Fleet      FleetConfig
	Encoding   Encoding
	Visibility Visibility
	EventDelay time.Duration
	Gateways   int
	// ShareDelay and DynamoSyncDelay: the sync delays modelled
	// (ShareDelay 0: MeasuredShareDelay).
	ShareDelay, DynamoSyncDelay time.Duration
	// Runs is how many times each strategy was replayed (Config.Runs).
	Runs int
	// Cluster describes the cluster the hint strategies used.
	Cluster string
	// Strategies are the results in run order.
	Strategies []Result
}

// check refuses a Config the replay cannot run, naming the value, and
// fills the defaults of the fields left zero.
func (cfg *Config) check() error {
	if cfg.Trace == nil || len(cfg.Trace.Requests) == 0 {
		return errors.New("bench: empty trace")
	}
	if err := cfg.Fleet.fill(); err != nil {
		return err
	}
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = AllStrategies
	}
	if cfg.Encoding == "" {
		cfg.Encoding = EncodingPositional
	}
	if cfg.Visibility == "" {
		cfg.Visibility = VisibilityDelay
	}
	switch cfg.Visibility {
	case VisibilityDelay:
	case VisibilityTimestamp, VisibilityRequest:
		cfg.Fleet.EventsAtArrival = true
	default:
		return fmt.Errorf("bench: visibility %q: want delay, timestamp or request", cfg.Visibility)
	}
	if cfg.EventDelay < 0 {
		return fmt.Errorf("bench: event delay %v: must not be negative", cfg.EventDelay)
	}
	if cfg.EventDelay == 0 {
		cfg.EventDelay = DefaultEventDelay
	}
	if cfg.Gateways == 0 {
		cfg.Gateways = 1
	}
	if cfg.Runs == 0 {
		cfg.Runs = 1
	}
	if cfg.Runs < 1 || cfg.Runs > MaxRuns {
		return fmt.Errorf("bench: %d runs: want 1 to %d", cfg.Runs, MaxRuns)
	}
	if cfg.Gateways < 1 || cfg.Gateways > 1024 {
		return fmt.Errorf("bench: %d gateways: want 1 to 1024", cfg.Gateways)
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.ReportInterval < client.MinLoadShareInterval || cfg.ReportInterval > client.MaxLoadShareInterval {
		// The gateways' own load reporters run with it.
		return fmt.Errorf("bench: report interval %v: want %v to %v", cfg.ReportInterval, client.MinLoadShareInterval, client.MaxLoadShareInterval)
	}
	if cfg.ShareDelay < 0 {
		return fmt.Errorf("bench: share delay %v: must not be negative", cfg.ShareDelay)
	}
	if cfg.TurnWait == 0 {
		cfg.TurnWait = turns.DefaultWait
	}
	if cfg.DynamoSyncDelay < 0 {
		return fmt.Errorf("bench: dynamo sync delay %v: must not be negative", cfg.DynamoSyncDelay)
	}
	if cfg.DynamoSyncDelay == 0 {
		cfg.DynamoSyncDelay = DefaultDynamoSyncDelay
	}
	if cfg.ScrapeInterval <= 0 {
		cfg.ScrapeInterval = DefaultScrapeInterval
	}
	if cfg.SubscriberScrape <= 0 {
		cfg.SubscriberScrape = DefaultSubscriberScrape
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Run replays cfg.Trace cfg.Runs times per strategy, each on a fresh
// fleet of the same settings, and reports the medians of the runs (seeds
// cfg.Seed, cfg.Seed+1, …). Hint strategies run the observation path
// (engine publishers, the observe Subscriber, the cluster) with the
// fleet's replicas cleared in the cluster before the first lookup, so no
// run sees another's blocks. Their CachePolicy is set with
// SetCachePolicy before the replay and the cluster's original policy is
// restored at the end.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	needCluster := false
	for _, s := range cfg.Strategies {
		if !slices.Contains(AllStrategies, s) && s != StrategyPickerIndexer {
			return nil, fmt.Errorf("bench: unknown strategy %q (want one of %v)", s, AllStrategies)
		}
		needCluster = needCluster || UsesCluster(s)
	}
	rep := &Report{Trace: cfg.Trace.Name, Requests: len(cfg.Trace.Requests), IdealTokenHitRate: cfg.Trace.IdealHitRate(),
		DistinctBlocks: cfg.Trace.DistinctBlocks(), SpanMs: cfg.Trace.SpanMs(), Fleet: cfg.Fleet,
		Encoding: cfg.Encoding, Visibility: cfg.Visibility, EventDelay: cfg.EventDelay, Gateways: cfg.Gateways,
		ShareDelay: cfg.ShareDelay, DynamoSyncDelay: cfg.DynamoSyncDelay, Runs: cfg.Runs}
	var cl *client.Client
	if needCluster {
		if len(cfg.Addrs) == 0 {
			return nil, errors.New("bench: hint strategies need cluster addresses")
		}
		var err error
		if cl, err = client.New(client.Config{Addrs: cfg.Addrs, LookupTimeout: cfg.LookupTimeout, TLS: cfg.Client.TLS, Credentials: cfg.Client.Credentials}); err != nil {
			return nil, err
		}
		defer cl.Close()
		orig, err := getPolicy(ctx, cl)
		if err != nil {
			return nil, err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := setPolicy(rctx, cl, orig); err != nil {
				cfg.Logger.Warn("could not restore the cluster's CachePolicy", "err", err)
			}
		}()
	}
	for _, name := range cfg.Strategies {
		runs, seeds := make([]*Result, cfg.Runs), make([]uint64, cfg.Runs)
		for i := range runs {
			c := cfg
			c.Seed = cfg.Seed + uint64(i)
			res, err := runStrategy(ctx, &c, name, cl, rep.IdealTokenHitRate)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			runs[i], seeds[i] = res, c.Seed
		}
		rep.Strategies = append(rep.Strategies, *medianOfRuns(runs, seeds))
	}
	return rep, nil
}

// visible returns the rule that says whether an event published at
// virtual time at is visible to a lookup at t (see Visibility).
func (cfg *Config) visible(t float64) func(at float64) bool {
	switch cfg.Visibility {
	case VisibilityTimestamp:
		return func(at float64) bool { return at < t }
	case VisibilityRequest:
		return func(float64) bool { return true }
	}
	cut := t - cfg.EventDelay.Seconds()
	return func(at float64) bool { return at < cut }
}
