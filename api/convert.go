package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/ident"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// RequestError is a write request refused whole (INVALID_ARGUMENT): Limit
// names the limit or rule, Detail the offending value.
type RequestError struct {
	Limit  string
	Detail string
}

func (e *RequestError) Error() string {
	return "request refused: " + e.Limit + ": " + e.Detail
}

// EventsFromPB validates and converts the events of an Ingest request (contract
// §6, 9). Events given as token_ids + block_size are fingerprinted here
// (contract §3); events without block_token_counts count every block as the
// model's policy block size. observed_at_ms = 0 becomes nowMs (the write
// is stamped once, here, so apply stays deterministic).
//
// It returns the valid events in request order, one rejection per invalid
// event (event_index = its position in the request), and a *RequestError
// when the request as a whole is over a limit (then nothing is returned).
func EventsFromPB(req *pb.IngestRequest, pol *policy.Policy, nowMs int64) ([]index.BlockEvent, []*pb.Rejection, error) {
	evs := req.GetEvents()
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, nil, err
	}
	if len(evs) > MaxEventsPerRequest {
		return nil, nil, &RequestError{Limit: "at most " + strconv.Itoa(MaxEventsPerRequest) + " events per request (MaxEventsPerRequest)", Detail: strconv.Itoa(len(evs)) + " events"}
	}
	total := 0
	for _, e := range evs {
		n := len(e.GetBlockHashes())
		if bs := e.GetBlockSize(); len(e.GetTokenIds()) > 0 && bs > 0 {
			n += len(e.GetTokenIds()) / int(bs)
		}
		total += n
	}
	if total > MaxBlocksPerRequest {
		return nil, nil, &RequestError{Limit: "at most " + strconv.Itoa(MaxBlocksPerRequest) + " blocks per request (MaxBlocksPerRequest)", Detail: strconv.Itoa(total) + " blocks"}
	}
	out := make([]index.BlockEvent, 0, len(evs))
	var rej []*pb.Rejection
	for i, e := range evs {
		ev, reason := eventFromPB(e, pol, nowMs)
		if reason != "" {
			rej = append(rej, &pb.Rejection{EventIndex: uint32(i), Reason: reason})
			continue
		}
		out = append(out, ev)
	}
	return out, rej, nil
}

// checkRequestID refuses a write's request_id that is not valid UTF-8,
// is over MaxRequestIDBytes, holds a control character, or is blank
// (spaces only: a client bug that would make unrelated writes share an
// id; leave it empty for a server-made one).
func checkRequestID(id string) *RequestError {
	if !utf8.ValidString(id) {
		return &RequestError{Limit: "request_id must be valid UTF-8", Detail: strconv.Quote(id)}
	}
	if len(id) > MaxRequestIDBytes {
		return &RequestError{Limit: "request_id at most " + strconv.Itoa(MaxRequestIDBytes) + " bytes", Detail: strconv.Itoa(len(id)) + " bytes"}
	}
	if r := hiddenChar("request_id", id); r != "" {
		return &RequestError{Limit: "request_id without control or invisible characters", Detail: r}
	}
	if id != "" && strings.TrimSpace(id) == "" {
		return &RequestError{Limit: "request_id not blank (leave it empty for a server-made id)", Detail: strconv.Quote(id)}
	}
	return nil
}

// hiddenChar is ident.Hidden's reason for v, naming field ("" when v
// has no hidden character).
func hiddenChar(field, v string) string {
	if h := ident.Hidden(v); h != "" {
		return field + " " + h
	}
	return ""
}

// checkID returns a rejection reason for an id field, "" when it is valid.
func checkID(field, v string, required bool) string {
	if !utf8.ValidString(v) {
		return field + " is not valid UTF-8"
	}
	if v == "" {
		if required {
			return field + " is empty"
		}
		return ""
	}
	if len(v) > MaxIDBytes {
		return field + " is " + strconv.Itoa(len(v)) + " bytes, over the limit of " + strconv.Itoa(MaxIDBytes)
	}
	if r := hiddenChar(field, v); r != "" {
		return r
	}
	if strings.TrimSpace(v) == "" {
		return field + " is blank (only whitespace)"
	}
	return ""
}

// AheadOfClock reports whether an observed_at_ms of v (unix ms) lies more
// than MaxFutureSkew ahead of the server clock nowMs: the event or stats
// entry is rejected for it, and Ingest counts it in
// IngestResponse.rejected_ahead_of_clock.
func AheadOfClock(v, nowMs int64) bool { return v > nowMs+MaxFutureSkew.Milliseconds() }

func checkObservedAt(v int64, nowMs int64) (int64, string) {
	if v < 0 {
		return 0, "observed_at_ms is negative (" + strconv.FormatInt(v, 10) + ")"
	}
	if v == 0 {
		return nowMs, ""
	}
	if AheadOfClock(v, nowMs) {
		return 0, "observed_at_ms " + strconv.FormatInt(v, 10) + " is more than " + MaxFutureSkew.String() + " ahead of the server clock (" + strconv.FormatInt(nowMs, 10) + ")"
	}
	return v, ""
}

func eventFromPB(e *pb.BlockEvent, pol *policy.Policy, nowMs int64) (index.BlockEvent, string) {
	var ev index.BlockEvent
	switch e.GetKind() {
	case pb.BlockEvent_STORED:
		ev.Kind = index.Stored
	case pb.BlockEvent_REMOVED:
		ev.Kind = index.Removed
	case pb.BlockEvent_CLEARED:
		ev.Kind = index.Cleared
	default:
		return ev, "kind " + strconv.Itoa(int(e.GetKind())) + " is not STORED, REMOVED or CLEARED"
	}
	if r := checkID("replica_id", e.GetReplicaId(), true); r != "" {
		return ev, r
	}
	at, r := checkObservedAt(e.GetObservedAtMs(), nowMs)
	if r != "" {
		return ev, r
	}
	ev.ReplicaID = e.GetReplicaId()
	ev.ObservedAtMs = at
	if ev.Kind == index.Cleared {
		// CLEARED drops every block of the replica in every partition; the
		// partition fields and blocks are not used.
		if len(e.GetBlockHashes()) > 0 || len(e.GetTokenIds()) > 0 {
			return ev, "CLEARED carries no blocks (block_hashes and token_ids must be empty)"
		}
		return ev, ""
	}
	if r := checkEventPartition(e); r != "" {
		return ev, r
	}
	ev.Partition = index.Partition{Scheme: e.GetHashScheme(), Model: e.GetModelId(), Tenant: e.GetTenantId(), Adapter: e.GetAdapterId()}
	hashes, toks := e.GetBlockHashes(), e.GetTokenIds()
	switch {
	case len(hashes) > 0 && len(toks) > 0:
		return ev, "give block_hashes or token_ids, not both"
	case len(toks) > 0:
		r = eventBlocksFromTokens(e, &ev)
	case len(hashes) > 0:
		r = eventBlocksFromHashes(e, pol, &ev)
	default:
		return ev, "no blocks: give block_hashes or token_ids"
	}
	if r != "" {
		return ev, r
	}
	// The cumulative prefix tokens of the last block must fit in uint32.
	cum := uint64(e.GetPrefixTokensBefore())
	for _, c := range ev.BlockTokenCounts {
		cum += uint64(c)
	}
	if cum > math.MaxUint32 {
		return ev, "prefix_tokens_before + block tokens = " + strconv.FormatUint(cum, 10) + " overflows uint32"
	}
	ev.PrefixTokensBefore = e.GetPrefixTokensBefore()
	return ev, ""
}

// checkEventPartition checks a STORED or REMOVED event's partition ids
// (scheme and model required, tenant and adapter optional) and returns
// the rejection reason, or "".
func checkEventPartition(e *pb.BlockEvent) string {
	if r := checkID("hash_scheme", e.GetHashScheme(), true); r != "" {
		return r
	}
	if r := checkID("model_id", e.GetModelId(), true); r != "" {
		return r
	}
	if r := checkID("tenant_id", e.GetTenantId(), false); r != "" {
		return r
	}
	return checkID("adapter_id", e.GetAdapterId(), false)
}

// eventBlocksFromTokens sets ev's blocks from e's token_ids, cut into
// blocks of e's block_size (every block counts block_size tokens; a
// partial last block is dropped). It returns the rejection reason, or "".
func eventBlocksFromTokens(e *pb.BlockEvent, ev *index.BlockEvent) string {
	toks := e.GetTokenIds()
	if len(toks) > MaxTokens {
		return "token_ids holds " + strconv.Itoa(len(toks)) + " tokens, over the limit of " + strconv.Itoa(MaxTokens)
	}
	bs := e.GetBlockSize()
	if bs == 0 || bs > MaxBlockSize {
		return "block_size " + strconv.FormatUint(uint64(bs), 10) + " must be between 1 and " + strconv.Itoa(MaxBlockSize) + " with token_ids"
	}
	if len(e.GetBlockTokenCounts()) > 0 {
		return "block_token_counts must be empty with token_ids (every block counts block_size)"
	}
	k, err := fingerprint.Compute(toks, int(bs))
	if err != nil {
		return "token_ids: " + err.Error()
	}
	if len(k.BlockHashes) == 0 {
		return "token_ids holds " + strconv.Itoa(len(toks)) + " tokens, less than one block of " + strconv.FormatUint(uint64(bs), 10)
	}
	if len(k.BlockHashes) > MaxChainLength {
		return "token_ids make " + strconv.Itoa(len(k.BlockHashes)) + " blocks, over the chain limit of " + strconv.Itoa(MaxChainLength)
	}
	ev.BlockHashes, ev.BlockTokenCounts = k.BlockHashes, k.BlockTokenCounts
	return ""
}

// eventBlocksFromHashes sets ev's blocks from e's block_hashes and
// block_token_counts; without counts every block counts the policy's
// block size for the model. It returns the rejection reason, or "".
func eventBlocksFromHashes(e *pb.BlockEvent, pol *policy.Policy, ev *index.BlockEvent) string {
	hashes, counts := e.GetBlockHashes(), e.GetBlockTokenCounts()
	if len(hashes) > MaxChainLength {
		return "block_hashes holds " + strconv.Itoa(len(hashes)) + " blocks, over the chain limit of " + strconv.Itoa(MaxChainLength)
	}
	if len(counts) == 0 {
		bs := pol.BlockSizeFor(ev.Partition.Model)
		counts = make([]uint32, len(hashes))
		for i := range counts {
			counts[i] = bs
		}
	} else if len(counts) != len(hashes) {
		return "block_token_counts has " + strconv.Itoa(len(counts)) + " entries, block_hashes " + strconv.Itoa(len(hashes)) + " (lengths must match)"
	}
	for i, c := range counts {
		if c == 0 {
			return "block_token_counts[" + strconv.Itoa(i) + "] is 0"
		}
		if c > MaxBlockSize {
			return "block_token_counts[" + strconv.Itoa(i) + "] is " + strconv.FormatUint(uint64(c), 10) + ", over the block limit of " + strconv.Itoa(MaxBlockSize)
		}
	}
	ev.BlockHashes, ev.BlockTokenCounts = hashes, counts
	return ""
}

// StatsFromPB validates and converts a ReportReplicaStats request (contract §4,
// 9), with the same contract as EventsFromPB: valid entries in order, one
// rejection per invalid entry, a *RequestError for a request over a limit.
func StatsFromPB(req *pb.ReportReplicaStatsRequest, nowMs int64) ([]index.ReplicaStats, []*pb.Rejection, error) {
	sts := req.GetStats()
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return nil, nil, err
	}
	if len(sts) > MaxStatsPerRequest {
		return nil, nil, &RequestError{Limit: "at most " + strconv.Itoa(MaxStatsPerRequest) + " stats entries per request (MaxStatsPerRequest)", Detail: strconv.Itoa(len(sts)) + " entries"}
	}
	out := make([]index.ReplicaStats, 0, len(sts))
	var rej []*pb.Rejection
	for i, s := range sts {
		st, reason := statsFromPB(s, nowMs)
		if reason != "" {
			rej = append(rej, &pb.Rejection{EventIndex: uint32(i), Reason: reason})
			continue
		}
		out = append(out, st)
	}
	return out, rej, nil
}

func checkUnit(field string, v float64) string {
	if !(v >= 0 && v <= 1) { // also catches NaN
		return field + " is " + strconv.FormatFloat(v, 'g', -1, 64) + ", must be between 0 and 1"
	}
	return ""
}

func statsFromPB(s *pb.ReplicaStats, nowMs int64) (index.ReplicaStats, string) {
	var st index.ReplicaStats
	if r := checkID("replica_id", s.GetReplicaId(), true); r != "" {
		return st, r
	}
	if r := checkID("model_id", s.GetModelId(), true); r != "" {
		return st, r
	}
	if n := len(s.GetHashSchemes()); n > MaxSchemesPerStats {
		return st, "hash_schemes holds " + strconv.Itoa(n) + " entries, over the limit of " + strconv.Itoa(MaxSchemesPerStats)
	}
	for i, h := range s.GetHashSchemes() {
		if r := checkID("hash_schemes["+strconv.Itoa(i)+"]", h, true); r != "" {
			return st, r
		}
	}
	if r := checkUnit("pressure", s.GetPressure()); r != "" {
		return st, r
	}
	if n := len(s.GetTenantHitRate()); n > MaxTenantsPerStats {
		return st, "tenant_hit_rate holds " + strconv.Itoa(n) + " tenants, over the limit of " + strconv.Itoa(MaxTenantsPerStats)
	}
	rates := make(map[string]float64, len(s.GetTenantHitRate()))
	for t, v := range s.GetTenantHitRate() {
		if r := checkID("tenant_hit_rate key", t, false); r != "" {
			return st, r
		}
		if r := checkUnit(fmt.Sprintf("tenant_hit_rate[%q]", t), v); r != "" {
			return st, r
		}
		rates[t] = v
	}
	if !utf8.ValidString(s.GetEndpoint()) {
		return st, "endpoint is not valid UTF-8"
	}
	if n := len(s.GetEndpoint()); n > MaxEndpointBytes {
		return st, "endpoint is " + strconv.Itoa(n) + " bytes, over the limit of " + strconv.Itoa(MaxEndpointBytes)
	}
	if r := checkQueue("waiting_requests", s.GetWaitingRequests()); r != "" {
		return st, r
	}
	if r := checkQueue("running_requests", s.GetRunningRequests()); r != "" {
		return st, r
	}
	at, r := checkObservedAt(s.GetObservedAtMs(), nowMs)
	if r != "" {
		return st, r
	}
	st = index.ReplicaStats{
		ReplicaID:     s.GetReplicaId(),
		ModelID:       s.GetModelId(),
		HashSchemes:   append([]string(nil), s.GetHashSchemes()...),
		Pressure:      s.GetPressure(),
		TenantHitRate: rates,
		ObservedAtMs:  at,
		Endpoint:      s.GetEndpoint(),

		WaitingRequests: s.GetWaitingRequests(),
		RunningRequests: s.GetRunningRequests(),
	}
	return st, ""
}

// checkQueue is the rejection reason for a queue length over
// MaxEngineRequests, "" when within it.
func checkQueue(field string, v uint32) string {
	if v > MaxEngineRequests {
		return field + " is " + strconv.FormatUint(uint64(v), 10) + ", over the limit of " + strconv.Itoa(MaxEngineRequests) + " (MaxEngineRequests)"
	}
	return ""
}
