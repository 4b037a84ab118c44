"""What the sync and async clients share: configuration, per-node backoff,
node choice, error classification, request ids and counters. The rules are
the Go SDK's (client/client.go, write.go, nodes.go; contract §5.10, §8.5)."""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import grpc

from . import _fingerprint
from .v1 import inferencecache_pb2 as pb
from .v1 import inferencecache_pb2_grpc as pb_grpc

#: Per-call budget of a lookup, its one retry on another node included (s).
DEFAULT_LOOKUP_TIMEOUT = 0.050
#: How long a node whose call failed is first skipped (s); doubles per failed probe up to 8x.
DEFAULT_FAIL_BACKOFF = 1.0
#: Total time one write is retried (s; contract §8.5: ~5 s).
DEFAULT_WRITE_RETRY = 5.0
#: Bound of one write attempt (s); its outcome is then unknown and it is retried with the same id.
DEFAULT_WRITE_ATTEMPT_TIMEOUT = 2.0
#: A write attempt unanswered this long health-checks its node (s).
DEFAULT_WRITE_PROBE_AFTER = 0.5
#: Bound of that health check (s).
DEFAULT_PROBE_TIMEOUT = 0.5
#: The server's gRPC message limit (bytes; api.MaxMessageBytes).
MAX_MESSAGE_BYTES = 16 << 20
#: Least time between two warnings about events rejected for a clock ahead of the server's (s).
CLOCK_WARN_INTERVAL = 60.0
#: A node that keeps failing is skipped at most fail_backoff << MAX_BACKOFF_SHIFT between probes.
MAX_BACKOFF_SHIFT = 3
#: The first pause between write attempts (s), doubling to WRITE_BACKOFF_MAX, with full jitter.
WRITE_BACKOFF_FIRST = 0.025
WRITE_BACKOFF_MAX = 0.5

log = logging.getLogger("inference_cache")

# Go's names of the gRPC codes (codes.Code.String()), so a fail-open detail
# reads the same from either SDK.
_GO_CODE_NAMES = {grpc.StatusCode.OK: "OK", grpc.StatusCode.CANCELLED: "Canceled"}


def go_code_name(code: Optional[grpc.StatusCode]) -> str:
    """The Go name of a gRPC code ("Unavailable", "DeadlineExceeded"); "Unknown" for None."""
    if code is None:
        return "Unknown"
    return _GO_CODE_NAMES.get(code) or "".join(w.capitalize() for w in code.name.split("_"))


def new_request_id() -> str:
    """A random 128-bit request id in lower-case hex (32 characters), as the Go
    SDK's client.NewRequestID: one per logical write, kept by its retries."""
    return secrets.token_hex(16)


def node_fault(code: Optional[grpc.StatusCode]) -> bool:
    """Whether a lookup error says the node (or the way to it) failed, so
    another node may answer: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED."""
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED)


def retriable(code: Optional[grpc.StatusCode]) -> bool:
    """Whether a failed write may be retried with the same request id (contract
    §8.5): UNAVAILABLE, or DEADLINE_EXCEEDED of one attempt (outcome unknown)."""
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _varint(b: bytes, i: int) -> Tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _fields(b: bytes):
    """(field number, wire type, value) of a protobuf message's fields: ints
    for varints, bytes for length-delimited values; fixed-width ones skipped."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
            yield num, wt, v
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated field")
            yield num, wt, b[i : i + n]
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")


_RETRY_INFO_URL = "type.googleapis.com/google.rpc.RetryInfo"


def retry_after(code: Optional[grpc.StatusCode], trailing_metadata) -> Optional[float]:
    """The delay (s) a RESOURCE_EXHAUSTED refusal asks for in the
    google.rpc.RetryInfo of its status details (the server's write
    admission, contract §6.5); None for any other error or without one.

    The details travel as a serialized google.rpc.Status (code 1, message 2,
    details 3: repeated google.protobuf.Any) in the grpc-status-details-bin
    trailer; RetryInfo is {retry_delay 1: google.protobuf.Duration}.
    """
    if code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in trailing_metadata or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        try:
            for num, wt, detail in _fields(value):
                if num != 3 or wt != 2:
                    continue
                url, body = "", b""
                for n2, w2, v2 in _fields(detail):
                    if n2 == 1 and w2 == 2:
                        url = v2.decode("utf-8", "replace")
                    elif n2 == 2 and w2 == 2:
                        body = v2
                if url != _RETRY_INFO_URL:
                    continue
                for n3, w3, dur in _fields(body):
                    if n3 == 1 and w3 == 2:
                        secs = nanos = 0
                        for n4, w4, v4 in _fields(dur):
                            if n4 == 1 and w4 == 0:
                                secs = v4 - (1 << 64) if v4 >= 1 << 63 else v4
                            elif n4 == 2 and w4 == 0:
                                nanos = v4 - (1 << 64) if v4 >= 1 << 63 else v4
                        return max(0.0, secs + nanos / 1e9)
        except ValueError:
            return None
    return None


@dataclass
class ClientConfig:
    """Configuration of Client and AsyncClient; durations in seconds.

    addrs: the nodes' gRPC addresses, host:port (at least one).
    lookup_timeout: budget of one lookup, its one retry included (50 ms).
    fail_backoff: how long a node is skipped after a call failed for its own
        sake (UNAVAILABLE, DEADLINE_EXCEEDED, no answer; for lookups also
        RESOURCE_EXHAUSTED and ABORTED), doubling per failed probe up to 8x;
        never for a refused request. Lookups and writes skip apart (1 s).
    write_retry: total budget of one write, attempts and pauses (5 s).
    write_attempt_timeout: bound of one write attempt (2 s).
    write_probe_after: a write attempt unanswered this long health-checks
        its node and is abandoned (retried elsewhere, same id) when the node
        does not answer (0.5 s); negative = no health checks.
    probe_timeout: bound of that health check (0.5 s).
    sticky_writes: send writes to the node that answered the last one
        (addrs[0] first) instead of round robin.
    credentials: grpc.ChannelCredentials for TLS; None = plaintext.
    bearer_token: sent as "authorization: Bearer <token>" on every call.
    channel_options: extra grpc channel options (key, value) pairs.
    Errors: ValueError naming the field and its limit.
    """

    addrs: Sequence[str]
    lookup_timeout: float = DEFAULT_LOOKUP_TIMEOUT
    fail_backoff: float = DEFAULT_FAIL_BACKOFF
    write_retry: float = DEFAULT_WRITE_RETRY
    write_attempt_timeout: float = DEFAULT_WRITE_ATTEMPT_TIMEOUT
    write_probe_after: float = DEFAULT_WRITE_PROBE_AFTER
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT
    sticky_writes: bool = False
    credentials: Optional[grpc.ChannelCredentials] = None
    bearer_token: Optional[str] = None
    channel_options: Sequence[Tuple[str, object]] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if isinstance(self.addrs, str):
            self.addrs = [a.strip() for a in self.addrs.split(",") if a.strip()]
        self.addrs = list(self.addrs)
        if not self.addrs:
            raise ValueError("addrs: at least one address is required")
        for i, a in enumerate(self.addrs):
            if not isinstance(a, str) or not a or "://" in a:
                raise ValueError(f"addrs[{i}] {a!r}: must be host:port (no scheme)")
        for name in ("lookup_timeout", "fail_backoff", "write_retry", "write_attempt_timeout", "probe_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name} {v!r}: must be a positive number of seconds")
        if isinstance(self.write_probe_after, bool) or not isinstance(self.write_probe_after, (int, float)) \
                or self.write_probe_after == 0:
            raise ValueError(f"write_probe_after {self.write_probe_after!r}: must be positive seconds, "
                             "or negative for no health checks")

    def channel_args(self) -> List[Tuple[str, object]]:
        """The grpc channel options: the server's message limits, then channel_options."""
        return [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)] + list(self.channel_options)

    def metadata(self) -> Optional[Tuple[Tuple[str, str], ...]]:
        """The call metadata: the bearer token when one is set."""
        if self.bearer_token:
            return (("authorization", "Bearer " + self.bearer_token),)
        return None


@dataclass
class Stats:
    """The client's cumulative counters (the Go SDK's client.Stats).

    lookups: lookups made; fail_open: lookups the client itself answered
    NO_HINT; lookup_retries: lookups retried on a second node;
    write_retries: write attempts retried; write_timeouts: write attempts
    that ended without an answer (timed out or abandoned after a failed
    health check); ingest_rejected_ahead_of_clock: events the cluster
    rejected for an observed_at_ms over 5 minutes ahead of its clock.
    """

    lookups: int = 0
    fail_open: int = 0
    lookup_retries: int = 0
    write_retries: int = 0
    write_timeouts: int = 0
    ingest_rejected_ahead_of_clock: int = 0


class WriteError(Exception):
    """A write (ingest, report_replica_stats) that failed: refused
    (INVALID_ARGUMENT, …), or the last failure once its retries ran out.

    code: the grpc.StatusCode; message: the server's or the client's text;
    addr: the node of the last attempt; request_id: the id every attempt
    carried (retry the same write with it to stay de-duplicated);
    retry_after: the delay (s) a RESOURCE_EXHAUSTED refusal asked for, or None.
    """

    def __init__(self, code: grpc.StatusCode, message: str, addr: str = "", request_id: str = "") -> None:
        super().__init__(f"{go_code_name(code)}: {message}")
        self.code, self.message, self.addr, self.request_id = code, message, addr, request_id
        self.retry_after: Optional[float] = None


class _Backoff:
    """One path's (lookup or write) view of whether a node is worth calling;
    nodes.go's backoff. Guarded by the owning _Nodes' lock."""

    __slots__ = ("down_until", "fails")

    def __init__(self) -> None:
        self.down_until = 0.0
        self.fails = 0

    def ok(self) -> None:
        self.fails, self.down_until = 0, 0.0

    def failed(self, now: float, base: float, probe: bool) -> None:
        if probe:
            self.fails += 1
        elif self.fails == 0:
            self.fails = 1
        else:
            return
        self.down_until = now + base * (1 << min(self.fails - 1, MAX_BACKOFF_SHIFT))

    def release(self, now: float) -> None:
        if self.fails and self.down_until > now:
            self.down_until = now

    def claim(self, now: float, hold: float) -> Tuple[bool, bool]:
        if self.down_until > now:
            return False, False
        if self.fails == 0:
            return True, False
        self.down_until = now + hold
        return True, True


class Node:
    """One server node: its address, channel, stubs and two backoffs."""

    def __init__(self, idx: int, addr: str, channel, unary: Callable) -> None:
        self.idx, self.addr, self.channel = idx, addr, channel
        self.ic = pb_grpc.InferenceCacheStub(channel)
        self.cluster = pb_grpc.ClusterStub(channel)
        self.health = unary("/grpc.health.v1.Health/Check", request_serializer=lambda _: b"",
                            response_deserializer=lambda b: b)
        self.lookup, self.write = _Backoff(), _Backoff()


class _Nodes:
    """The nodes, round robin and the counters, behind one lock. by_addr is
    the nodes by address: a lookup that takes a turn and the picker's soft
    state (load reports) go to the first of them not skipped (contract
    §5.13), so that every gateway listing the same nodes takes its turns at
    one node and settles them there."""

    def __init__(self, nodes: List[Node]) -> None:
        self.nodes = nodes
        self.by_addr = sorted(nodes, key=lambda n: n.addr)
        self.lock = threading.Lock()
        self._next = 0
        self.write_at = 0
        self.stats = Stats()

    def next(self) -> int:
        with self.lock:
            self._next += 1
            return self._next

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def snapshot(self) -> Stats:
        with self.lock:
            return Stats(**vars(self.stats))

    def pick(self, track: str, start: int, skip: Optional[Node], hold: float,
             by_addr: bool = False, usable_only: bool = False) -> Tuple[Optional[Node], bool]:
        """The first node from start (mod the count) that track does not skip,
        and whether the call is its probe; all skipped: the first from start,
        or None with usable_only (a lookup then fails open at once). skip is
        avoided unless it is the only node. by_addr: among the nodes by
        address instead of in their configured order."""
        now = time.monotonic()
        fallback = None
        nodes = self.by_addr if by_addr else self.nodes
        with self.lock:
            for i in range(len(nodes)):
                n = nodes[(start + i) % len(nodes)]
                if n is skip:
                    continue
                if fallback is None:
                    fallback = n
                usable, probe = getattr(n, track).claim(now, hold)
                if usable:
                    return n, probe
        if usable_only:
            return None, False
        return (fallback or skip), False

    def mark(self, n: Node, track: str, verb: str, *args) -> None:
        with self.lock:
            getattr(getattr(n, track), verb)(*args)


def fill_fingerprint(req: pb.LookupRouteRequest, token_ids: Sequence[int], block_size: int) -> None:
    """Set req's block_hashes, block_token_counts and prefix_hash from
    token_ids (in the domain of req.cache_salt) exactly as the server would,
    and clear token_ids and prompt_text. Raises FingerprintError."""
    fp = _fingerprint.fingerprint(token_ids, block_size, req.cache_salt)
    del req.block_hashes[:]
    req.block_hashes.extend(fp.block_hashes)
    del req.block_token_counts[:]
    req.block_token_counts.extend(fp.block_token_counts)
    req.prefix_hash = fp.prefix_hash or 0
    del req.token_ids[:]
    req.prompt_text = ""


def fail_open_response(code: Optional[grpc.StatusCode], message: str) -> pb.LookupRouteResponse:
    """The NO_HINT the client answers itself: detail "client: <Code>: <message>; failing open"."""
    return pb.LookupRouteResponse(reason_code=pb.NO_HINT,
                                  detail=f"client: {go_code_name(code)}: {message}; failing open")


class ClockWarner:
    """Logs events rejected for a clock ahead of the server's, at most once per CLOCK_WARN_INTERVAL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: Optional[float] = None
        self._skipped = 0

    def warn(self, events, resp: pb.IngestResponse) -> None:
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < CLOCK_WARN_INTERVAL:
                self._skipped += 1
                return
            self._last, skipped, self._skipped = now, self._skipped, 0
        newest = max((e.observed_at_ms for e in events), default=0)
        server = resp.server_time_ms
        log.warning(
            "inference-cache: block events rejected: observed_at_ms ahead of the server clock; check the clock "
            "(NTP) of whatever stamps them: rejected_ahead_of_clock=%d events=%d events_ahead_by_ms=%d "
            "local_clock_ahead_by_ms=%d server_time_ms=%d warnings_suppressed=%d",
            resp.rejected_ahead_of_clock, len(events), newest - server, int(time.time() * 1000) - server,
            server, skipped)


#: The message of a lookup that failed open at once: every node it could go
#: to failed within its skip period (fail_backoff), as the Go SDK says it.
EVERY_NODE_SKIPPED = "every node is skipped after failing within the last FailBackoff"


class LookupAttempts:
    """The retry rules of one lookup (Client.lookup_route), shared by the
    blocking and asyncio clients, which only make the calls: at most two
    nodes within the budget lookup_timeout; a node fault (node_fault)
    skips the node for lookups and tries one other; any other failure, or
    the budget spent, ends the lookup with NO_HINT (fail_open). A lookup
    that takes a turn (turn) goes to the first usable node by address
    (contract §5.13)."""

    def __init__(self, nodes: _Nodes, cfg: ClientConfig, turn: bool = False) -> None:
        self._nodes, self._cfg, self._turn = nodes, cfg, turn
        nodes.count("lookups")
        self.deadline = time.monotonic() + cfg.lookup_timeout
        self.left = 0.0  # seconds of budget for the current call
        self._code: Optional[grpc.StatusCode] = grpc.StatusCode.DEADLINE_EXCEEDED
        self._msg = "lookup budget spent"
        self._prev: Optional[Node] = None
        self._node: Optional[Node] = None
        self._probe = False
        self._tries = 0
        self._done = False

    def next(self) -> Optional[Node]:
        """The node to call now, or None when the lookup must fail open."""
        if self._done or self._tries >= 2:
            return None
        start = 0 if self._turn else self._nodes.next()
        n, probe = self._nodes.pick("lookup", start, self._prev, self._cfg.lookup_timeout, by_addr=self._turn,
                                    usable_only=True)
        if n is None:
            # Every node failed within its skip period: calling one anyway
            # would cost the request the whole budget while the cluster is
            # out; each node's probe, when its period ends, finds it back.
            if not self._tries:
                self._code, self._msg = grpc.StatusCode.UNAVAILABLE, EVERY_NODE_SKIPPED
            self._done = True
            return None
        if self._tries:
            self._nodes.count("lookup_retries")
        self._tries += 1
        self._node, self._probe = n, probe
        self.left = self.deadline - time.monotonic()
        if self.left <= 0:
            self.release()
            return None
        return n

    def ok(self) -> None:
        """The call answered."""
        self._nodes.mark(self._node, "lookup", "ok")

    def release(self) -> None:
        """The call ended without a verdict on the node (not sent, or the
        caller cancelled): a probe slot it held is given back."""
        if self._probe:
            self._nodes.mark(self._node, "lookup", "release", time.monotonic())

    def unsent(self, message: str) -> None:
        """The request could not be sent (e.g. encoded): no retry."""
        self._code, self._msg = grpc.StatusCode.UNKNOWN, message
        self.release()
        self._done = True

    def failed(self, code: Optional[grpc.StatusCode], message: str) -> None:
        """The call failed with code."""
        self._code, self._msg = code, message
        n = self._node
        if not node_fault(code):
            # The node answered and refused the request: another would too.
            if code != grpc.StatusCode.CANCELLED:
                self._nodes.mark(n, "lookup", "ok")
            else:
                self.release()
            self._done = True
            return
        self._nodes.mark(n, "lookup", "failed", time.monotonic(), self._cfg.fail_backoff, self._probe)
        self._prev = n
        if time.monotonic() >= self.deadline or len(self._nodes.nodes) == 1:
            self._done = True

    def fail_open(self) -> pb.LookupRouteResponse:
        """The NO_HINT answer naming the last failure (counted as fail-open)."""
        self._nodes.count("fail_open")
        return fail_open_response(self._code, self._msg)


class WriteAttempts:
    """The retry rules of one write (Client._write, as the Go SDK's
    client.write), shared by the blocking and asyncio clients: retriable
    failures (UNAVAILABLE, DEADLINE_EXCEEDED) skip the node for writes and
    are retried on another after a pause of 25 ms doubling to 500 ms with
    full jitter; a RESOURCE_EXHAUSTED with a RetryInfo is retried after the
    delay it asks, blaming no node; other errors end the write at once; all
    within write_retry."""

    def __init__(self, nodes: _Nodes, cfg: ClientConfig, request_id: str) -> None:
        self._nodes, self._cfg, self._request_id = nodes, cfg, request_id
        self.deadline = time.monotonic() + cfg.write_retry
        self._backoff = WRITE_BACKOFF_FIRST
        self._prev: Optional[Node] = None
        self._node: Optional[Node] = None
        self._probe = False
        self._err: Optional[WriteError] = None

    def next(self) -> Node:
        """The node to call now."""
        nodes = self._nodes
        start = nodes.write_at if self._cfg.sticky_writes else nodes.next()
        self._node, self._probe = nodes.pick("write", start, self._prev, self._cfg.write_attempt_timeout)
        return self._node

    def ok(self) -> None:
        """The write committed on the current node."""
        self._nodes.mark(self._node, "write", "ok")
        self._nodes.write_at = self._node.idx

    def release(self) -> None:
        """The caller cancelled: a probe slot the node held is given back."""
        if self._probe:
            self._nodes.mark(self._node, "write", "release", time.monotonic())

    def failed(self, e: WriteError) -> float:
        """The attempt failed with e: the pause (seconds) before the next,
        after which resume() must be called. Raises e when the write ends."""
        e.request_id = self._request_id
        self._err = e
        nodes, n, now = self._nodes, self._node, time.monotonic()
        if e.retry_after is not None:
            nodes.mark(n, "write", "ok")
            if self.deadline - now > e.retry_after:
                return e.retry_after
            raise e
        if not retriable(e.code):
            nodes.mark(n, "write", "ok")  # a refusal is an answer: the node is up
            raise e
        if now >= self.deadline:
            self.release()
            raise e
        nodes.mark(n, "write", "failed", now, self._cfg.fail_backoff, self._probe)
        pause = random.uniform(0, self._backoff) + 0.001
        self._backoff = min(2 * self._backoff, WRITE_BACKOFF_MAX)
        return max(0.0, min(pause, self.deadline - now))

    def resume(self) -> None:
        """After the pause: raises the last error when the budget is spent
        by a node's failure, else counts the retry."""
        e = self._err
        if e is not None and e.retry_after is None:
            if time.monotonic() >= self.deadline:
                raise e
            self._prev = self._node
        self._nodes.count("write_retries")


def share_targets(nodes: _Nodes, hold: float) -> Tuple[List[Node], Dict[int, bool]]:
    """The nodes a picks push goes to (contract §5.12): every node lookups do
    not skip; when they skip every one, the next one's probe. Also which of
    them (by idx) the call probes."""
    now = time.monotonic()
    with nodes.lock:
        to = [n for n in nodes.nodes if n.lookup.down_until <= now]
    if to:
        return to, {}
    n, probe = nodes.pick("lookup", nodes.next(), None, hold)
    return [n], {n.idx: probe}


def share_outcome(nodes: _Nodes, to: List[Node], results: List, probes: Dict[int, bool],
                  fail_backoff: float) -> Tuple[object, Optional[Node], bool]:
    """Marks each node by its result (a response or the call's exception)
    and returns the first response (raising the last grpc.RpcError when no
    node answered), the node that gave it, and whether any call failed."""
    first, err, answered, failed = None, None, None, False
    for n, r in zip(to, results):
        if isinstance(r, grpc.RpcError):
            report_failed(nodes, n, probes.get(n.idx, False), r.code(), fail_backoff)
            failed, err = True, r
            continue
        if isinstance(r, BaseException):
            raise r
        nodes.mark(n, "lookup", "ok")
        if first is None:
            first, answered = r, n
    if first is None:
        raise err
    return first, answered, failed


def report_failed(nodes: _Nodes, n: Node, probe: bool, code: Optional[grpc.StatusCode], fail_backoff: float) -> None:
    """Marks n after a failed load report (contract §5.11): a node fault
    skips it for lookups and reports as fail_backoff says; any other failure
    is an answer, and only gives back a probe slot."""
    now = time.monotonic()
    if node_fault(code):
        nodes.mark(n, "lookup", "failed", now, fail_backoff, probe)
    elif probe:
        nodes.mark(n, "lookup", "release", now)
