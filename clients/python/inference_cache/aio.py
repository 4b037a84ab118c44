"""The asyncio client (grpc.aio): AsyncClient, with the rules of Client."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Callable, Optional, Sequence

import grpc
import grpc.aio

from ._core import (
    WRITE_BACKOFF_FIRST,
    WRITE_BACKOFF_MAX,
    ClientConfig,
    ClockWarner,
    Node,
    Stats,
    WriteError,
    _Nodes,
    fail_open_response,
    fill_fingerprint,
    new_request_id,
    node_fault,
    retriable,
    retry_after,
)
from ._fingerprint import FingerprintError
from .v1 import inferencecache_pb2 as pb


class AsyncClient:
    """The asyncio twin of Client: the same configuration (ClientConfig
    fields as keyword options), fail-open lookups and retried writes.

    Create it inside a running event loop (grpc.aio channels bind to it);
    use ``async with`` or await close(). Safe for many concurrent tasks.
    """

    def __init__(self, addrs: Sequence[str], **options) -> None:
        self.config = ClientConfig(addrs=addrs, **options)
        nodes = []
        for i, a in enumerate(self.config.addrs):
            if self.config.credentials is not None:
                ch = grpc.aio.secure_channel(a, self.config.credentials, options=self.config.channel_args())
            else:
                ch = grpc.aio.insecure_channel(a, options=self.config.channel_args())
            nodes.append(Node(i, a, ch, ch.unary_unary))
        self._n = _Nodes(nodes)
        self._md = self.config.metadata()
        self._clock = ClockWarner()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel."""
        for n in self._n.nodes:
            await n.channel.close()

    @property
    def addrs(self) -> Sequence[str]:
        """The configured addresses, in order."""
        return list(self.config.addrs)

    def stats(self) -> Stats:
        """A copy of the counters."""
        return self._n.snapshot()

    async def lookup_route(self, req: pb.LookupRouteRequest) -> pb.LookupRouteResponse:
        """Client.lookup_route for asyncio: never raises (cancellation of the
        awaiting task aside), NO_HINT on any failure or when lookup_timeout ends."""
        nodes, cfg = self._n, self.config
        nodes.count("lookups")
        deadline = time.monotonic() + cfg.lookup_timeout
        code: Optional[grpc.StatusCode] = grpc.StatusCode.DEADLINE_EXCEEDED
        msg = "lookup budget spent"
        prev: Optional[Node] = None
        for attempt in range(2):
            n, probe = nodes.pick("lookup", nodes.next(), prev, cfg.lookup_timeout)
            if attempt:
                nodes.count("lookup_retries")
            left = deadline - time.monotonic()
            if left <= 0:
                if probe:
                    nodes.mark(n, "lookup", "release", time.monotonic())
                break
            try:
                resp = await n.ic.LookupRoute(req, timeout=left, metadata=self._md)
            except grpc.RpcError as e:
                code, msg = e.code(), e.details() or ""
            except asyncio.CancelledError:
                if probe:
                    nodes.mark(n, "lookup", "release", time.monotonic())
                raise
            except Exception as e:  # the request could not be sent (e.g. encoded)
                code, msg = grpc.StatusCode.UNKNOWN, str(e)
                if probe:
                    nodes.mark(n, "lookup", "release", time.monotonic())
                break
            else:
                nodes.mark(n, "lookup", "ok")
                return resp
            if not node_fault(code):
                if code != grpc.StatusCode.CANCELLED:
                    nodes.mark(n, "lookup", "ok")
                elif probe:
                    nodes.mark(n, "lookup", "release", time.monotonic())
                break
            nodes.mark(n, "lookup", "failed", time.monotonic(), cfg.fail_backoff, probe)
            prev = n
            if time.monotonic() >= deadline or len(nodes.nodes) == 1:
                break
        nodes.count("fail_open")
        return fail_open_response(code, msg)

    async def lookup_tokens(self, req: pb.LookupRouteRequest, token_ids: Sequence[int],
                            block_size: int) -> pb.LookupRouteResponse:
        """Client.lookup_tokens for asyncio."""
        try:
            fill_fingerprint(req, token_ids, block_size)
        except FingerprintError as e:
            self._n.count("lookups")
            self._n.count("fail_open")
            return pb.LookupRouteResponse(reason_code=pb.NO_HINT, detail=f"client: {e}")
        return await self.lookup_route(req)

    async def ingest(self, req: pb.IngestRequest) -> pb.IngestResponse:
        """Client.ingest for asyncio; raises WriteError."""
        r = pb.IngestRequest(events=req.events, request_id=req.request_id or new_request_id())
        resp = await self._write(lambda n: n.ic.Ingest, r)
        if resp.rejected_ahead_of_clock:
            self._n.count("ingest_rejected_ahead_of_clock", resp.rejected_ahead_of_clock)
            self._clock.warn(r.events, resp)
        return resp

    async def report_replica_stats(self, req: pb.ReportReplicaStatsRequest) -> pb.ReportReplicaStatsResponse:
        """Client.report_replica_stats for asyncio; raises WriteError."""
        r = pb.ReportReplicaStatsRequest(stats=req.stats, request_id=req.request_id or new_request_id())
        return await self._write(lambda n: n.ic.ReportReplicaStats, r)

    async def _write(self, method: Callable[[Node], Callable], req):
        """Client._write for asyncio (the same retry rules)."""
        nodes, cfg = self._n, self.config
        deadline = time.monotonic() + cfg.write_retry
        backoff = WRITE_BACKOFF_FIRST
        prev: Optional[Node] = None
        while True:
            start = nodes.write_at if cfg.sticky_writes else nodes.next()
            n, probe = nodes.pick("write", start, prev, cfg.write_attempt_timeout)
            try:
                resp = await self._attempt(n, method(n), req, deadline)
            except WriteError as err:
                e = err
            except asyncio.CancelledError:
                if probe:
                    nodes.mark(n, "write", "release", time.monotonic())
                raise
            else:
                nodes.mark(n, "write", "ok")
                nodes.write_at = n.idx
                return resp
            e.request_id = req.request_id
            now = time.monotonic()
            if e.retry_after is not None:
                nodes.mark(n, "write", "ok")
                if deadline - now > e.retry_after:
                    await asyncio.sleep(e.retry_after)
                    nodes.count("write_retries")
                    continue
                raise e
            if not retriable(e.code):
                nodes.mark(n, "write", "ok")
                raise e
            if now >= deadline:
                if probe:
                    nodes.mark(n, "write", "release", now)
                raise e
            nodes.mark(n, "write", "failed", now, cfg.fail_backoff, probe)
            pause = random.uniform(0, backoff) + 0.001
            backoff = min(2 * backoff, WRITE_BACKOFF_MAX)
            await asyncio.sleep(max(0.0, min(pause, deadline - now)))
            if time.monotonic() >= deadline:
                raise e
            prev = n
            nodes.count("write_retries")

    async def _attempt(self, n: Node, call: Callable, req, deadline: float):
        """Client._attempt for asyncio."""
        cfg = self.config
        start = time.monotonic()
        budget = min(cfg.write_attempt_timeout, deadline - start)
        if budget <= 0:
            raise WriteError(grpc.StatusCode.DEADLINE_EXCEEDED, "client: write budget spent", n.addr)
        rpc = call(req, timeout=budget, metadata=self._md)
        task = asyncio.ensure_future(rpc)
        try:
            if 0 < cfg.write_probe_after < budget:
                done, _ = await asyncio.wait({task}, timeout=cfg.write_probe_after)
                if not done and await self._unresponsive(n) and not task.done():
                    rpc.cancel()
                    self._n.count("write_timeouts")
                    raise WriteError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"client: write to {n.addr} abandoned after {time.monotonic() - start:.3f}s: "
                                     "node did not answer a health check (outcome unknown)", n.addr)
            return await task
        except grpc.RpcError as e:
            code, details = e.code(), e.details() or ""
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                self._n.count("write_timeouts")
                raise WriteError(code, f"client: write to {n.addr} timed out after {time.monotonic() - start:.3f}s "
                                 f"(outcome unknown): {details}", n.addr) from None
            err = WriteError(code, details, n.addr)
            err.retry_after = retry_after(code, await _trailers(e))
            raise err from None
        finally:
            if not task.done():
                task.cancel()

    async def _unresponsive(self, n: Node) -> bool:
        """Client._unresponsive for asyncio."""
        try:
            await n.health(b"", timeout=self.config.probe_timeout, metadata=self._md)
        except grpc.RpcError as e:
            return e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
        return False

    async def status(self, node: int = 0, timeout: float = 5.0) -> pb.StatusResponse:
        """Cluster.Status of the node at index node of addrs (raises grpc.RpcError)."""
        return await self._n.nodes[node].cluster.Status(pb.StatusRequest(), timeout=timeout, metadata=self._md)


async def _trailers(e: grpc.RpcError):
    """The trailing metadata of a failed aio call (a coroutine on grpc.aio calls)."""
    md = e.trailing_metadata()
    if asyncio.iscoroutine(md):
        md = await md
    return md
