package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// Details of NO_HINT answers produced by the API layer itself (contract §5.7
// fail-open). They are constants so the hot path never formats a string;
// each names the field or limit at fault. DetailNoScheme, DetailNoKey and
// DetailCountsMismatch are the index's key rules (index.CheckScheme,
// index.CheckCounts), in the index's words: one wording whichever layer
// answers.
const (
	DetailNoScheme         = index.DetailNoScheme
	DetailNoKey            = index.DetailNoKey
	DetailSchemeTooLong    = "hash_scheme over MaxIDBytes (256)"
	DetailModelTooLong     = "model_id over MaxIDBytes (256)"
	DetailTenantTooLong    = "tenant_id over MaxIDBytes (256)"
	DetailAdapterTooLong   = "adapter_id over MaxIDBytes (256)"
	DetailSaltTooLong      = "cache_salt over MaxCacheSaltBytes (4096)"
	DetailChainTooLong     = "block_hashes over MaxChainLength (8192)"
	DetailCountsTooLong    = "block_token_counts over MaxChainLength (8192)"
	DetailCountsMismatch   = index.DetailCountsMismatch
	DetailCountsZero       = "block_token_counts holds a 0"
	DetailCountsTooBig     = "block_token_counts holds a value over MaxBlockSize (4096)"
	DetailTokensTooLong    = "token_ids over MaxTokens (262144)"
	DetailPromptTooLong    = "prompt_text over MaxPromptBytes (1048576)"
	DetailMaxReplicas      = "max_replicas over MaxReplicasRequested (64)"
	DetailNoTokenizer      = "prompt_text needs a tokenizer: the server has no models directory (--models-dir)"
	DetailTokenizeFailed   = "prompt_text could not be tokenized for this model_id"
	DetailNoModelTokenizer = "prompt_text: no tokenizer for this model_id in the models directory"
	DetailUnsupportedTok   = "prompt_text: this model_id's tokenizer.json uses a type the server does not support"
	DetailMalformedTok     = "prompt_text: this model_id's tokenizer.json is malformed"
	DetailPromptUTF8       = "prompt_text is not valid UTF-8"
	DetailTokenizeTooLong  = "prompt_text tokenizes to more than MaxTokens (262144)"
	DetailTokenizeTimeout  = "prompt_text tokenization stopped at the policy lookupTimeoutMs budget"
	DetailTokenizerLoading = "prompt_text: this model_id's tokenizer is loading (its first use on this node); retry shortly"
	DetailTimeout          = "lookup exceeded the policy lookupTimeoutMs budget"
	DetailPanic            = "internal error during lookup (recovered)"
	DetailNotReady         = "node has not loaded its state yet"
	DetailCanceled         = "request canceled by the caller"
	DetailUndecodable      = "request bytes are not a LookupRouteRequest (protobuf decode failed)"
)

// lookupScratch holds the per-call buffers of LookupRoute, pooled so that a
// lookup allocates only its response.
type lookupScratch struct {
	req      index.LookupRequest
	res      index.Result
	counts   []uint32
	newestMs int64         // ReadState.NewestObservedMs of this lookup
	offset   time.Duration // ReadState.ClockOffsetToLeader of this lookup
}

var scratchPool = sync.Pool{New: func() any { return new(lookupScratch) }}

func (sc *lookupScratch) reset() {
	// Drop references to the caller's request slices so the pool does not
	// pin them; keep our own buffers.
	sc.req = index.LookupRequest{}
	sc.res.Reset()
	sc.counts = sc.counts[:0]
}

// LookupRoute answers the hint for one request (contract §5.7). It never returns
// an error: every problem is a NO_HINT answer with a Detail (a request
// over MaxMessageBytes never reaches it: gRPC refuses it with
// RESOURCE_EXHAUSTED, see limits.go). It recovers
// panics, and enforces the policy's lookupTimeoutMs budget: tokenizing
// prompt_text stops when the budget (or the caller's context) ends, or as
// soon as the ids exceed MaxTokens, and the budget is checked again after
// key resolution and after ranking (the index lookup itself is bounded by
// the request limits and is not preempted). It fills served_by,
// applied_index, stale and last_leader_contact_ms from the node's read
// state, and names in detail a clock offset to the leader over
// LookupClockOffsetBound.
func (s *Service) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) (resp *pb.LookupRouteResponse, _ error) {
	// The turn comes first: the answer is read once it is this picker's
	// turn, from a state that holds the picks of the turns before it, and
	// the lookup's own budget counts from then.
	turn, waited := s.takeTurn(ctx, req)
	start := s.now()
	if turn != 0 || waited != 0 {
		defer func() {
			resp.Turn, resp.TurnWaitUs = turn, uint32(min(waited.Microseconds(), math.MaxUint32))
		}()
	}
	resp = &pb.LookupRouteResponse{}
	sc := scratchPool.Get().(*lookupScratch)
	var el time.Duration // measured after ranking; saves a clock read
	defer func() {
		if r := recover(); r != nil {
			resp = &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Detail: DetailPanic}
			s.log.Error("lookup panic recovered", slog.Any("panic", r))
			func() {
				defer func() { _ = recover() }()
				s.fillReadState(resp, nil)
			}()
			// sc may be in any state: let the collector have it.
		} else {
			sc.reset()
			scratchPool.Put(sc)
		}
		if el == 0 {
			el = time.Since(start)
		}
		s.metrics.LookupDone(int32(resp.ReasonCode), el)
	}()
	staleReason := s.fillReadState(resp, sc)
	s.lookup(ctx, req, sc, resp, start, &el)
	if now := start.UnixMilli(); sc.req.NowMs < now && resp.ReasonCode != pb.ReasonCode_NO_HINT {
		resp.Detail += fmt.Sprintf(" (this node's clock is %.0f s ahead of the newest observation in its index; freshness counted from that observation)", float64(now-sc.req.NowMs+LookupClockMargin.Milliseconds())/1000)
	}
	if d := sc.offset; d > LookupClockOffsetBound || d < -LookupClockOffsetBound {
		resp.Detail += clockOffsetDetail(d)
	}
	if resp.Stale && staleReason != "" {
		// The response has no field for it; operators reading a stale
		// answer want to know why without scraping metrics.
		resp.Detail += " (stale: " + staleReason + ")"
	}
	return resp, nil
}

// maxTurnKeyBytes bounds the picker and model ids a turn is kept under;
// a lookup naming longer ones takes no turn.
const maxTurnKeyBytes = 256

// turnMargin is what a turn's wait leaves of the call's deadline: the
// lookup itself and its answer's way back to the gateway.
const turnMargin = 5 * time.Millisecond

// takeTurn takes the lookup's turn (contract §5.13) when it asks for one
// with a picker id and this node orders picks: at most the node's turn
// wait, and never into the last turnMargin of the call's deadline, so the
// lookup itself still has time. (0, 0) when no turn is asked for.
func (s *Service) takeTurn(ctx context.Context, req *pb.LookupRouteRequest) (turn uint64, waited time.Duration) {
	picker, model := req.GetPickerId(), req.GetModelId()
	if !req.GetTakeTurn() || s.turns == nil || picker == "" || len(picker) > maxTurnKeyBytes || len(model) > maxTurnKeyBytes {
		return 0, 0
	}
	bound := s.turnWait
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl)-turnMargin)
	}
	defer func() {
		// Before LookupRoute's own recovery: a panic here fails the turn
		// open, never the lookup.
		if r := recover(); r != nil {
			s.log.Error("turn panic recovered", slog.Any("panic", r))
			turn, waited = 0, 0
		}
	}()
	return s.turns.Wait(ctx, model, picker, bound)
}

// fillReadState sets the read-state fields and returns the stale reason;
// sc (nil = none) keeps the newest observation time for the lookup's
// clock.
func (s *Service) fillReadState(resp *pb.LookupRouteResponse, sc *lookupScratch) string {
	rs := s.node.ReadState()
	if sc != nil {
		sc.newestMs = rs.NewestObservedMs
		sc.offset = rs.ClockOffsetToLeader
	}
	resp.ServedBy = rs.NodeID
	resp.AppliedIndex = rs.AppliedIndex
	resp.Stale = rs.Stale
	resp.LastLeaderContactMs = uint64(rs.LastLeaderContact.Milliseconds())
	return rs.StaleReason
}

// LookupClockMargin bounds the clock a lookup ranks with: at most this far
// past the newest observation the local index holds. Freshness is the age
// of a residency against the node's clock; a node whose clock runs
// minutes ahead would find every residency expired-fresh and answer no
// PREFIX_MATCH at all.
const LookupClockMargin = time.Minute

// LookupClockOffsetBound is how far this node's clock may differ from the
// leader's (ReadState.ClockOffsetToLeader, measured over gossip) before
// LookupRoute says so in its detail, with the direction and the seconds.
// Freshness (contract §5.4) is a residency's age against the serving node's
// clock, so a node behind the leader ranks residencies as fresher than
// they are (down to ones the leader is about to expire) and a node ahead
// as staler. The answer is not marked stale: the contract (§8.4) reserves stale for
// missing leader contact, and the clock says nothing about replication.
// The bound equals LookupClockMargin: below a minute, against the
// default 600 s evictionTTL, freshness is off by under a tenth.
const LookupClockOffsetBound = LookupClockMargin

// clockOffsetDetail is the detail clause for an offset to the leader
// over LookupClockOffsetBound (off = the leader's clock minus this
// node's). Formatted only then: a node in step pays nothing.
func clockOffsetDetail(off time.Duration) string {
	if off > 0 {
		return fmt.Sprintf(" (this node's clock is %.0f s behind the leader's; freshness is counted from this node's clock, so residencies look fresher than they are)", off.Seconds())
	}
	return fmt.Sprintf(" (this node's clock is %.0f s ahead of the leader's; freshness is counted from this node's clock, so residencies look older than they are)", -off.Seconds())
}

// lookupNow is the lookup's time: now, bounded to newest plus
// LookupClockMargin when the index holds observations.
func lookupNow(now, newest int64) int64 {
	if newest > 0 && now > newest+LookupClockMargin.Milliseconds() {
		return newest + LookupClockMargin.Milliseconds()
	}
	return now
}

func noHint(resp *pb.LookupRouteResponse, detail string) {
	resp.Replicas = nil
	resp.ReasonCode = pb.ReasonCode_NO_HINT
	resp.Detail = detail
}

func (s *Service) lookup(ctx context.Context, req *pb.LookupRouteRequest, sc *lookupScratch, resp *pb.LookupRouteResponse, start time.Time, el *time.Duration) {
	if d := checkLookup(req); d != "" {
		noHint(resp, d)
		return
	}
	if !s.node.Ready() {
		noHint(resp, DetailNotReady)
		return
	}
	pol := s.policy(start)
	budget := pol.LookupTimeout

	r := &sc.req
	r.Partition = index.Partition{Scheme: req.GetHashScheme(), Model: req.GetModelId(), Tenant: req.GetTenantId(), Adapter: req.GetAdapterId()}
	r.SLOTTFTMs = req.GetSlo().GetTtftMs()
	r.MaxReplicas = req.GetMaxReplicas()
	r.NowMs = lookupNow(start.UnixMilli(), sc.newestMs)
	r.Explain = req.GetExplain()
	r.IncludeLoad = req.GetIncludeLoad()
	r.CacheSalt = req.GetCacheSalt()
	if d := s.lookupKey(ctx, req, r, start, budget); d != "" {
		noHint(resp, d)
		return
	}

	res := &sc.res
	s.node.Lookup(r, res)
	*el = time.Since(start)
	if *el > budget {
		noHint(resp, DetailTimeout)
		return
	}
	if ctx.Err() != nil {
		noHint(resp, DetailCanceled)
		return
	}
	resp.ReasonCode = pb.ReasonCode(res.Reason)
	resp.Detail = res.Detail
	fillHints(resp, res)
	fillLoads(resp, res)
	if r.IncludeLoad {
		s.fillOthers(req, resp)
	}
	s.mergeProvisional(req, res, resp, pol.MaxReplicas)
	if len(res.CreditHashes) > 0 {
		// The index decided (contract §5: a delivered PREFIX_MATCH under LFU)
		// with the policy it ranked with; the cached copy here may be
		// older.
		s.node.Credit(res.CreditPartition, res.CreditHashes)
	}
}

// lookupKey sets r's key from req: block hashes or a prefix hash, token
// ids, or the prompt text tokenized within what is left of budget since
// start. It returns the NO_HINT detail when there is no usable key, or "".
func (s *Service) lookupKey(ctx context.Context, req *pb.LookupRouteRequest, r *index.LookupRequest, start time.Time, budget time.Duration) string {
	switch {
	case len(req.GetBlockHashes()) > 0 || req.GetPrefixHash() != 0:
		r.BlockHashes = req.GetBlockHashes()
		r.BlockTokenCounts = req.GetBlockTokenCounts()
		r.PrefixHash = req.GetPrefixHash()
		r.HasPrefixHash = req.GetPrefixHash() != 0
	case len(req.GetTokenIds()) > 0:
		r.TokenIDs = req.GetTokenIds()
	case req.GetPromptText() != "":
		return s.tokenizePrompt(ctx, req, r, start, budget)
	default:
		return DetailNoKey
	}
	return ""
}

// tokenizePrompt sets r.TokenIDs to req's prompt text tokenized for its
// model within budget since start. It returns the NO_HINT detail when
// there is no tokenizer, tokenizing fails or is too long, or the budget is
// spent; otherwise "".
func (s *Service) tokenizePrompt(ctx context.Context, req *pb.LookupRouteRequest, r *index.LookupRequest, start time.Time, budget time.Duration) string {
	if s.tok == nil {
		return DetailNoTokenizer
	}
	tctx, cancel := context.WithDeadline(ctx, start.Add(budget))
	ids, err := s.tok.EncodeContext(tctx, req.GetModelId(), req.GetPromptText(), MaxTokens)
	cancel()
	if err != nil {
		s.log.Debug("tokenize failed", slog.String("model_id", req.GetModelId()), slog.Any("err", err))
		d := tokenizeDetail(err)
		if d == DetailTokenizeTimeout && time.Since(start) < budget {
			d = DetailCanceled // the caller's context ended first
		}
		return d
	}
	if len(ids) > MaxTokens {
		return DetailTokenizeTooLong
	}
	r.TokenIDs = ids
	if time.Since(start) > budget {
		return DetailTimeout
	}
	return ""
}

// fillHints copies the index's ranked hints (and their explanations) into
// resp, from one slab.
func fillHints(resp *pb.LookupRouteResponse, res *index.Result) {
	n := len(res.Hints)
	if n == 0 {
		return
	}
	slab := make([]pb.ReplicaHint, n)
	resp.Replicas = make([]*pb.ReplicaHint, n)
	for i := range res.Hints {
		h := &res.Hints[i]
		p := &slab[i]
		p.ReplicaId = h.ReplicaID
		p.Score = h.Score
		p.MatchedTokens = h.MatchedTokens
		p.MatchedBlocks = h.MatchedBlocks
		p.Freshness = h.Freshness
		p.AgeMs = h.AgeMs
		p.Pressure = h.Pressure
		p.WaitingRequests = h.WaitingRequests
		p.RunningRequests = h.RunningRequests
		resp.Replicas[i] = p
	}
	if len(res.Factors) == n {
		explainHints(resp.Replicas, res.Factors, string(res.RankingVersion))
	}
}

// fillLoads copies the index's loads of the hinted replicas into resp,
// from one slab.
func fillLoads(resp *pb.LookupRouteResponse, res *index.Result) {
	n := len(res.Loads)
	if n == 0 {
		return
	}
	slab := make([]pb.ReplicaLoad, n)
	resp.Loads = make([]*pb.ReplicaLoad, n)
	for i := range res.Loads {
		l := &res.Loads[i]
		slab[i] = pb.ReplicaLoad{ReplicaId: l.ReplicaID, WaitingRequests: l.WaitingRequests, RunningRequests: l.RunningRequests,
			Pressure: l.Pressure, StatsAgeMs: l.AgeMs}
		resp.Loads[i] = &slab[i]
	}
}

// explainHints attaches each hint's factors (LookupRouteRequest.explain),
// from one slab; f is parallel to hints.
func explainHints(hints []*pb.ReplicaHint, f []index.Factors, version string) {
	slab := make([]pb.HintFactors, len(hints))
	for i, h := range hints {
		x, e := &f[i], &slab[i]
		e.RankingVersion = version
		e.Freshness = x.Freshness
		e.PressureFactor = x.PressureFactor
		e.SloBias = x.SLOBias
		e.DistinguishingPower = x.DistinguishingPower
		e.MatchingAtDepth = x.MatchingAtDepth
		e.TotalReplicas = x.TotalReplicas
		e.TenantHitRate = x.TenantHitRate
		e.AffinityPick = x.Rendezvous
		e.StatsFresh = x.StatsFresh
		h.Factors = e
	}
}

// tokenizeDetail maps a tokenizer error to its NO_HINT detail. The full
// error (which names server file paths) goes only to the log.
func tokenizeDetail(err error) string {
	switch {
	case errors.Is(err, tokenizer.ErrNoModelsDir):
		return DetailNoTokenizer
	case errors.Is(err, tokenizer.ErrUnknownModel):
		return DetailNoModelTokenizer
	case errors.Is(err, tokenizer.ErrUnsupported):
		return DetailUnsupportedTok
	case errors.Is(err, tokenizer.ErrMalformed):
		return DetailMalformedTok
	case errors.Is(err, tokenizer.ErrInvalidUTF8):
		return DetailPromptUTF8
	case errors.Is(err, tokenizer.ErrTooManyTokens):
		return DetailTokenizeTooLong
	case errors.Is(err, tokenizer.ErrLoading):
		return DetailTokenizerLoading
	case errors.Is(err, tokenizer.ErrStopped):
		return DetailTokenizeTimeout
	}
	return DetailTokenizeFailed
}

// checkLookup returns the NO_HINT detail for a request over a limit (contract
// §9), "" when every field is within its limit.
func checkLookup(req *pb.LookupRouteRequest) string {
	if d := checkUTF8(req); d != "" {
		return d
	}
	if d := index.CheckScheme(req.GetHashScheme()); d != "" {
		return d
	}
	switch {
	case len(req.GetHashScheme()) > MaxIDBytes:
		return DetailSchemeTooLong
	case len(req.GetModelId()) > MaxIDBytes:
		return DetailModelTooLong
	case len(req.GetTenantId()) > MaxIDBytes:
		return DetailTenantTooLong
	case len(req.GetAdapterId()) > MaxIDBytes:
		return DetailAdapterTooLong
	case len(req.GetCacheSalt()) > MaxCacheSaltBytes:
		return DetailSaltTooLong
	case len(req.GetBlockHashes()) > MaxChainLength:
		return DetailChainTooLong
	case len(req.GetBlockTokenCounts()) > MaxChainLength:
		return DetailCountsTooLong
	}
	if d := index.CheckCounts(req.GetBlockHashes(), req.GetBlockTokenCounts()); d != "" {
		return d
	}
	switch {
	case len(req.GetTokenIds()) > MaxTokens:
		return DetailTokensTooLong
	case len(req.GetPromptText()) > MaxPromptBytes:
		return DetailPromptTooLong
	case req.GetMaxReplicas() > MaxReplicasRequested:
		return DetailMaxReplicas
	}
	for _, c := range req.GetBlockTokenCounts() {
		if c == 0 {
			return DetailCountsZero
		}
		if c > MaxBlockSize {
			return DetailCountsTooBig
		}
	}
	return ""
}
