"""The synchronous client (grpcio): Client.

Lookups fail open: any error, or the lookup budget running out, gives a
NO_HINT response, never an exception, so a gateway can call lookup_route on
every request and route round robin on NO_HINT (contract §5.7, §5.10).
Writes carry one request id per logical write and are retried on the
retriable outcomes with the Go SDK's rules (contract §8.5).
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import grpc

from ._core import (
    LookupAttempts,
    WriteAttempts,
    ClientConfig,
    ClockWarner,
    Node,
    Stats,
    WriteError,
    _Nodes,
    report_failed,
    share_outcome,
    share_targets,
    fill_fingerprint,
    new_request_id,
    retry_after,
)
from ._fingerprint import FingerprintError
from .v1 import inferencecache_pb2 as pb


class Client:
    """A client of several inference-cache nodes; safe to share between threads.

    Client(addrs, **options): addrs is a list of host:port (or one
    comma-separated string); options are the fields of ClientConfig
    (lookup_timeout=0.05, fail_backoff=1.0, write_retry=5.0, …, seconds).
    Channels connect lazily. Use as a context manager or call close().
    """

    def __init__(self, addrs: Sequence[str], **options) -> None:
        self.config = ClientConfig(addrs=addrs, **options)
        nodes = []
        for i, a in enumerate(self.config.addrs):
            if self.config.credentials is not None:
                ch = grpc.secure_channel(a, self.config.credentials, options=self.config.channel_args())
            else:
                ch = grpc.insecure_channel(a, options=self.config.channel_args())
            nodes.append(Node(i, a, ch, ch.unary_unary))
        self._n = _Nodes(nodes)
        self._md = self.config.metadata()
        self._clock = ClockWarner()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel."""
        for n in self._n.nodes:
            n.channel.close()

    @property
    def addrs(self) -> Sequence[str]:
        """The configured addresses, in order."""
        return list(self.config.addrs)

    def stats(self) -> Stats:
        """A copy of the counters."""
        return self._n.snapshot()

    # Lookups.

    def lookup_route(self, req: pb.LookupRouteRequest) -> pb.LookupRouteResponse:
        """Ask one node for req's hint (contract §5). Never raises: when the
        node fails (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
        ABORTED) it is skipped for lookups and one other node is tried within
        the budget lookup_timeout; when that fails too, the budget ends, or
        the request itself fails (no retry, no node blamed), the answer is
        NO_HINT with detail "client: <Code>: <message>; failing open"
        (counted in stats().fail_open). While lookups skip every node it
        fails open at once, calling none, except for the one lookup that
        probes a node whose skip period ended. A lookup that takes a turn
        (take_turn, contract §5.13) goes to the first usable node by
        address, so that every gateway listing the same nodes takes its
        turns at one node."""
        a = LookupAttempts(self._n, self.config, turn=bool(getattr(req, "take_turn", False)))
        while (n := a.next()) is not None:
            try:
                resp = n.ic.LookupRoute(req, timeout=a.left, metadata=self._md)
            except grpc.RpcError as e:
                a.failed(e.code(), e.details() or "")
            except Exception as e:  # the request could not be sent (e.g. encoded)
                a.unsent(str(e))
            else:
                a.ok()
                return resp
        return a.fail_open()

    def lookup_tokens(self, req: pb.LookupRouteRequest, token_ids: Sequence[int], block_size: int) -> pb.LookupRouteResponse:
        """Fingerprint token_ids locally into req (in the hash domain of
        req.cache_salt; fill_fingerprint) and call lookup_route. Bad token ids
        or block size give NO_HINT naming them (counted as fail-open)."""
        try:
            fill_fingerprint(req, token_ids, block_size)
        except FingerprintError as e:
            self._n.count("lookups")
            self._n.count("fail_open")
            return pb.LookupRouteResponse(reason_code=pb.NO_HINT, detail=f"client: {e}")
        return self.lookup_route(req)

    def report_picker_load(self, req: pb.ReportPickerLoadRequest, timeout: float = 0.05) -> pb.ReportPickerLoadResponse:
        """Send one picker's load report (contract §5.11) to the first usable
        node by address (where this picker's turns are taken and settled,
        contract §5.13) in a single attempt of at most timeout seconds: a
        report is superseded by the next, so it is never retried. A node that does not answer
        (node_fault) is skipped for lookups and reports as fail_backoff
        says. Raises the call's grpc.RpcError. LoadShare sends these."""
        nodes = self._n
        n, probe = nodes.pick("lookup", 0, None, self.config.lookup_timeout, by_addr=True)
        try:
            resp = n.ic.ReportPickerLoad(req, timeout=timeout, metadata=self._md)
        except grpc.RpcError as e:
            report_failed(nodes, n, probe, e.code(), self.config.fail_backoff)
            raise
        nodes.mark(n, "lookup", "ok")
        return resp

    def report_picker_load_future(self, req: pb.ReportPickerLoadRequest, timeout: float = 0.05) -> grpc.Future:
        """report_picker_load without blocking: returns the call's grpc.Future
        (result() gives the ReportPickerLoadResponse or raises the call's
        grpc.RpcError; cancel() ends the call at once, so a reporter told to
        stop never waits out a hung node). The node is marked as
        report_picker_load marks it when the call ends; a cancelled call
        only gives back its probe slot."""
        nodes = self._n
        n, probe = nodes.pick("lookup", 0, None, self.config.lookup_timeout, by_addr=True)
        f = n.ic.ReportPickerLoad.future(req, timeout=timeout, metadata=self._md)

        def ended(f: grpc.Future) -> None:
            if f.cancelled():
                if probe:
                    nodes.mark(n, "lookup", "release", time.monotonic())
            elif f.exception() is not None:
                report_failed(nodes, n, probe, f.code(), self.config.fail_backoff)
            else:
                nodes.mark(n, "lookup", "ok")

        f.add_done_callback(ended)
        return f

    def share_picks(self, req: pb.SharePicksRequest, timeout: float = 0.25) -> pb.SharePicksResponse:
        """Send one picks push (contract §5.12) to every node lookups do not
        skip, all at once, each in a single attempt of at most timeout
        seconds, and return when every call has ended: the first answer, or
        raise the last call's grpc.RpcError when no node answered. Each copy
        says in sent_to_nodes how many nodes it went to, so that a node passes
        a delta on to its peers only when some live node was not sent it
        (req itself is not changed). When a call fails and another answered,
        a delta is sent again, with sent_to_nodes 0, to a node that answered,
        which passes it on (a copy that arrives twice is held once); a full
        state is not, since every node passes a full state on. A lost push is
        repaired by the picker's next full state, so none is retried.
        PickShare sends these."""
        to, probes = share_targets(self._n, self.config.lookup_timeout)
        sent = pb.SharePicksRequest()
        sent.CopyFrom(req)
        sent.sent_to_nodes = len(to)
        calls = [n.ic.SharePicks.future(sent, timeout=timeout, metadata=self._md) for n in to]
        results = []
        for f in calls:
            try:
                results.append(f.result())
            except grpc.RpcError as e:
                results.append(e)
        first, answered, failed = share_outcome(self._n, to, results, probes, self.config.fail_backoff)
        if failed and not req.full_state:
            sent.sent_to_nodes = 0
            try:
                answered.ic.SharePicks(sent, timeout=timeout, metadata=self._md)
            except grpc.RpcError:
                pass  # the picker's next full state repairs it
        return first

    # Writes.

    def ingest(self, req: pb.IngestRequest) -> pb.IngestResponse:
        """Commit a batch of block events (contract §6). Without a request_id
        one is generated (new_request_id); every retry carries the same id.
        Per-event rejections are in the response. Raises WriteError for a
        refused request (INVALID_ARGUMENT, …) or the last failure once the
        retries ran out. Events rejected for a clock ahead of the server's
        are counted and logged (at most once a minute), not retried."""
        r = pb.IngestRequest(events=req.events, request_id=req.request_id or new_request_id())
        resp = self._write(lambda n: n.ic.Ingest, r)
        if resp.rejected_ahead_of_clock:
            self._n.count("ingest_rejected_ahead_of_clock", resp.rejected_ahead_of_clock)
            self._clock.warn(r.events, resp)
        return resp

    def report_replica_stats(self, req: pb.ReportReplicaStatsRequest) -> pb.ReportReplicaStatsResponse:
        """Commit replica stats with the retry rules of ingest; raises WriteError."""
        r = pb.ReportReplicaStatsRequest(stats=req.stats, request_id=req.request_id or new_request_id())
        return self._write(lambda n: n.ic.ReportReplicaStats, r)

    def _write(self, method: Callable[[Node], Callable], req):
        """One logical write with the retries of the Go SDK's client.write:
        retriable failures (UNAVAILABLE, DEADLINE_EXCEEDED) skip the node for
        writes and are retried on another after a pause of 25 ms doubling to
        500 ms with full jitter; a RESOURCE_EXHAUSTED with a RetryInfo is
        retried after the delay it asks, blaming no node; other errors end
        the write at once; all within write_retry."""
        a = WriteAttempts(self._n, self.config, req.request_id)
        while True:
            n = a.next()
            try:
                resp = self._attempt(n, method(n), req, a.deadline)
            except WriteError as e:
                time.sleep(a.failed(e))  # raises e when the write ends
                a.resume()
            else:
                a.ok()
                return resp

    def _attempt(self, n: Node, call: Callable, req, deadline: float):
        """One write call to n, bounded by write_attempt_timeout and the
        write's deadline; abandoned early when n does not answer a health
        check started write_probe_after into the call. A call that ends
        without an answer raises WriteError(DEADLINE_EXCEEDED) naming the node."""
        cfg = self.config
        start = time.monotonic()
        budget = min(cfg.write_attempt_timeout, deadline - start)
        if budget <= 0:
            raise WriteError(grpc.StatusCode.DEADLINE_EXCEEDED, "client: write budget spent", n.addr)
        fut = call.future(req, timeout=budget, metadata=self._md)
        if 0 < cfg.write_probe_after < budget:
            try:
                return self._result(n, fut, start, cfg.write_probe_after)
            except grpc.FutureTimeoutError:
                if self._unresponsive(n) and not fut.done():
                    fut.cancel()
                    self._n.count("write_timeouts")
                    raise WriteError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"client: write to {n.addr} abandoned after {time.monotonic() - start:.3f}s: "
                                     "node did not answer a health check (outcome unknown)", n.addr) from None
        return self._result(n, fut, start, None)

    def _result(self, n: Node, fut, start: float, wait: Optional[float]):
        try:
            return fut.result(timeout=wait)
        except grpc.FutureTimeoutError:
            raise
        except grpc.RpcError as rpc:
            code, details = rpc.code(), rpc.details() or ""
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                self._n.count("write_timeouts")
                raise WriteError(code, f"client: write to {n.addr} timed out after {time.monotonic() - start:.3f}s "
                                 f"(outcome unknown): {details}", n.addr) from None
            err = WriteError(code, details, n.addr)
            err.retry_after = retry_after(code, rpc.trailing_metadata())
            raise err from None

    def _unresponsive(self, n: Node) -> bool:
        """Whether n failed to answer a grpc.health.v1 check within
        probe_timeout; any answer, even NOT_SERVING or an error status, shows
        the process runs."""
        try:
            n.health(b"", timeout=self.config.probe_timeout, metadata=self._md)
        except grpc.RpcError as e:
            return e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
        return False

    def status(self, node: int = 0, timeout: float = 5.0) -> pb.StatusResponse:
        """Cluster.Status of the node at index node of addrs (raises grpc.RpcError)."""
        return self._n.nodes[node].cluster.Status(pb.StatusRequest(), timeout=timeout, metadata=self._md)
