package api

import (
	"time"

	"github.com/inference-cache/inference-cache/fingerprint"
)

// Request limits (contract §9.1). Every request field has a bound; the bounds are
// gathered here, with the reason for each value, so an operator or an SDK
// author can read them in one place.
//
// What happens past a limit depends on the path:
//   - LookupRoute: the answer is NO_HINT with a detail naming the limit,
//     never a gRPC error (fail-open, contract §5.7).
//   - Ingest, IngestStream, ReportReplicaStats: a limit on the request as a
//     whole (MaxEventsPerRequest, MaxBlocksPerRequest, MaxStatsPerRequest,
//     MaxRequestIDBytes) refuses the request whole with INVALID_ARGUMENT
//     naming the limit; nothing of it is committed. A limit on one event or
//     stats entry (chain length, tokens, id lengths, tenants) rejects only
//     that entry, listed with its index and reason; the valid entries of the
//     same request still commit.
//   - Every RPC, LookupRoute included: MaxMessageBytes is enforced by gRPC
//     itself (RESOURCE_EXHAUSTED) before any handler runs. grpc-go checks
//     the message's length prefix against the server-wide
//     MaxRecvMsgSize and writes that status itself, in the stream's
//     RecvMsg, before the codec, any interceptor (unary RPCs do not pass
//     through stream interceptors) or the handler sees the call, and it
//     has no per-method limit: LookupRoute cannot answer such a request
//     NO_HINT. Raising the server-wide limit with a size check in the
//     codec would only move the cliff, and would let every RPC of every
//     service on the server (Raft forwarding and Cluster included) make
//     the server buffer larger messages. No valid LookupRoute comes near
//     the limit: its fields' own limits bound it under 3 MiB (1 MiB of
//     prompt_text, MaxTokens ids of at most 5 bytes, MaxChainLength
//     hashes of at most 10 bytes), so clients treat RESOURCE_EXHAUSTED
//     from LookupRoute, like a transport error, as NO_HINT.
//   - Any request of ours whose bytes cannot be decoded (not protobuf, or
//     a string that is not UTF-8 where the lenient write decoding does not
//     apply) is INVALID_ARGUMENT naming the message and the field, except
//     LookupRoute (NO_HINT, DetailUndecodable); see lookupCodec.
const (
	// MaxMessageBytes is the largest gRPC message the server receives or
	// sends (16 MiB). It bounds a whole Ingest batch on the wire; the
	// finer limits below bound what a message may decode to.
	MaxMessageBytes = 16 << 20

	// MaxIDBytes bounds replica_id, hash_scheme, model_id, tenant_id and
	// adapter_id (bytes). Ids are map keys held per block; 256 bytes fits
	// any Kubernetes object name (253) and any Hugging Face model path.
	MaxIDBytes = 256

	// MaxRequestIDBytes bounds the request_id of a write (bytes). Request
	// ids are kept by the FSM for de-duplication; 128 bytes is room for a
	// UUID or a 64-byte hex digest with a prefix.
	MaxRequestIDBytes = 128

	// MaxChainLength bounds block_hashes (and block_token_counts) of one
	// lookup or one block event, in blocks. 8,192 blocks of 16 tokens is a
	// 131,072-token prompt, above the context length of served models.
	MaxChainLength = 8192

	// MaxTokens bounds token_ids of one lookup or one block event. 262,144
	// tokens (1 MiB of ids) is twice the longest context window in common
	// use; a longer list cannot be a real prompt.
	MaxTokens = 262144

	// MaxCacheSaltBytes bounds a lookup's cache_salt (4 KiB): a salt is a
	// tenant secret or id, not content; anything longer is a client bug.
	MaxCacheSaltBytes = 4096

	// MaxPromptBytes bounds prompt_text of a lookup (1 MiB): about 250k
	// tokens of English text, in line with MaxTokens.
	MaxPromptBytes = 1 << 20

	// MaxBlockSize bounds block_size and each block_token_counts entry, in
	// tokens; it is the fingerprint package's bound (4,096).
	MaxBlockSize = fingerprint.MaxBlockSize

	// MaxReplicasRequested bounds a lookup's max_replicas; it equals the
	// largest maxReplicas a policy may set (64).
	MaxReplicasRequested = 64

	// MaxEventsPerRequest bounds the events of one Ingest request. The
	// leader coalesces requests into log entries anyway; 4,096 keeps one
	// request's validation and log entry small enough not to stall others.
	MaxEventsPerRequest = 4096

	// MaxBlocksPerRequest bounds the block hashes (given or fingerprinted)
	// summed over all events of one Ingest request: 262,144 hashes are
	// 2 MiB of log entry, well inside MaxMessageBytes.
	MaxBlocksPerRequest = 262144

	// MaxStatsPerRequest bounds the entries of one ReportReplicaStats
	// request: one per replica, and a fleet larger than 1,024 replicas is
	// reported in several requests.
	MaxStatsPerRequest = 1024

	// MaxTenantsPerStats bounds tenant_hit_rate of one stats entry.
	MaxTenantsPerStats = 1024

	// MaxSchemesPerStats bounds hash_schemes of one stats entry; an engine
	// speaks one or two schemes.
	MaxSchemesPerStats = 16

	// MaxEndpointBytes bounds the endpoint of a stats entry (a URL).
	MaxEndpointBytes = 1024

	// MaxEngineRequests bounds waiting_requests and running_requests of a
	// stats entry, in requests. An engine's running batch is capped by
	// its scheduler (vLLM max_num_seqs, SGLang max_running_requests:
	// hundreds to a few thousand) and its queue by what gateways send
	// one replica; 1,000,000 is far above both, so only a broken exporter
	// (a wrapped -1, a counter read as a gauge) reaches it, and its entry
	// is rejected rather than shown to gateways as a queue.
	MaxEngineRequests = 1_000_000

	// MaxConcurrentStreams bounds the RPCs one client connection may have
	// open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). Further calls
	// queue in the client until a stream frees, so one connection cannot
	// hold an unbounded number of handler goroutines; a lookup takes
	// microseconds, so 256 in flight per connection is far above what a
	// gateway needs.
	MaxConcurrentStreams = 256
	// StreamWindowBytes and ConnWindowBytes are the HTTP/2 flow-control
	// windows the server grants each stream and each connection. Fixed
	// windows turn off gRPC's bandwidth-delay estimate, which grows a
	// stream's window to 16 MiB: a client that floods streams the server
	// is not reading (admission makes them wait) could otherwise park
	// 16 MiB per stream in the server's memory. A stream buffers at most
	// its window, so one connection pins at most MaxConcurrentStreams ×
	// StreamWindowBytes (64 MiB); 256 KiB still moves 2.5 MB/s per stream
	// over a 100 ms round trip.
	StreamWindowBytes = 256 << 10
	ConnWindowBytes   = 1 << 20
	// StreamWorkers is the size of the gRPC server's pool of stream
	// worker goroutines; calls beyond it get a goroutine of their own.
	StreamWorkers = 64

	// KeepaliveMinTime is the shortest client keepalive ping interval the
	// server tolerates; a client pinging more often is sent GOAWAY
	// (ENHANCE_YOUR_CALM) and disconnected.
	KeepaliveMinTime = 10 * time.Second

	// MaxConnectionIdle closes a client connection idle this long; the
	// client reconnects transparently on its next call.
	MaxConnectionIdle = 30 * time.Minute

	// MaxFutureSkew is how far in the future observed_at_ms may lie
	// relative to the server's clock (5 minutes): more is a broken clock,
	// and a future last_seen would make a residency look fresher than new.
	MaxFutureSkew = 5 * time.Minute
)
