"""The asyncio client (grpc.aio): AsyncClient, with the rules of Client."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Sequence

import grpc
import grpc.aio

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
        a = LookupAttempts(self._n, self.config, turn=bool(getattr(req, "take_turn", False)))
        while (n := a.next()) is not None:
            try:
                resp = await n.ic.LookupRoute(req, timeout=a.left, metadata=self._md)
            except grpc.RpcError as e:
                a.failed(e.code(), e.details() or "")
            except asyncio.CancelledError:
                a.release()
                raise
            except Exception as e:  # the request could not be sent (e.g. encoded)
                a.unsent(str(e))
            else:
                a.ok()
                return resp
        return a.fail_open()

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

    async def report_picker_load(self, req: pb.ReportPickerLoadRequest,
                                 timeout: float = 0.05) -> pb.ReportPickerLoadResponse:
        """Client.report_picker_load for asyncio."""
        nodes = self._n
        n, probe = nodes.pick("lookup", 0, None, self.config.lookup_timeout, by_addr=True)
        try:
            resp = await n.ic.ReportPickerLoad(req, timeout=timeout, metadata=self._md)
        except grpc.RpcError as e:
            report_failed(nodes, n, probe, e.code(), self.config.fail_backoff)
            raise
        except asyncio.CancelledError:
            if probe:
                nodes.mark(n, "lookup", "release", time.monotonic())
            raise
        nodes.mark(n, "lookup", "ok")
        return resp


    async def share_picks(self, req: pb.SharePicksRequest, timeout: float = 0.25) -> pb.SharePicksResponse:
        """Client.share_picks for asyncio: the push to every node lookups do
        not skip at once, a missed delta sent again with sent_to_nodes 0 to a
        node that answered; raises the last call's grpc.RpcError when no node
        answered. AsyncPickShare sends these."""
        to, probes = share_targets(self._n, self.config.lookup_timeout)
        sent = pb.SharePicksRequest()
        sent.CopyFrom(req)
        sent.sent_to_nodes = len(to)
        results = await asyncio.gather(*(n.ic.SharePicks(sent, timeout=timeout, metadata=self._md) for n in to),
                                       return_exceptions=True)
        first, answered, failed = share_outcome(self._n, to, results, probes, self.config.fail_backoff)
        if failed and not req.full_state:
            sent.sent_to_nodes = 0
            try:
                await answered.ic.SharePicks(sent, timeout=timeout, metadata=self._md)
            except grpc.RpcError:
                pass  # the picker's next full state repairs it
        return first

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
        a = WriteAttempts(self._n, self.config, req.request_id)
        while True:
            n = a.next()
            try:
                resp = await self._attempt(n, method(n), req, a.deadline)
            except WriteError as e:
                await asyncio.sleep(a.failed(e))  # raises e when the write ends
                a.resume()
            except asyncio.CancelledError:
                a.release()
                raise
            else:
                a.ok()
                return resp

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
