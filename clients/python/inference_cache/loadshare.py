"""Shared in-flight load between pickers (contract §5.11), as the Go SDK's
client.LoadShare: a picker reports what it has in flight per replica every
interval, so that the other pickers' lookups with include_load see it in
ReplicaLoad.others_*. Reports fail open: one that fails or outlasts the
interval is dropped and the next replaces it; no request waits for one.
stop() cancels the report in flight and bounds the last, empty one by
STOP_TIMEOUT, so a hung node never holds up a stopping gateway.

LoadShare reports through a blocking Client from a thread; AsyncLoadShare
through an AsyncClient from an asyncio task. Set the picker's lookups'
picker_id to share.picker_id, so that their others_* leave its own load out.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

from .picker import Picker
from .v1 import inferencecache_pb2 as pb

#: Seconds between reports by default: another picker's lookups see a load
#: change within about 100 ms of wall time.
DEFAULT_INTERVAL = 0.05
#: The server's bounds on a report's interval (seconds).
MIN_INTERVAL, MAX_INTERVAL = 0.01, 60.0
#: The server's bound on a picker id (bytes of UTF-8).
MAX_PICKER_ID_BYTES = 128
#: At most one warning per this many seconds from a failing reporter.
WARN_EVERY = 60.0
#: The bound (seconds) on the last, empty report stop() sends when the
#: interval is longer: that report only saves the other pickers the wait for
#: expiry, and a gateway told to stop must stop within its grace period even
#: with a hung node.
STOP_TIMEOUT = 1.0

log = logging.getLogger("inference_cache.loadshare")


def default_picker_id() -> str:
    """A picker id unique to this process: hostname-pid-random (8 hex digits),
    its last MAX_PICKER_ID_BYTES bytes when longer."""
    host = socket.gethostname() or "picker"
    pid = f"{host}-{os.getpid()}-{secrets.token_hex(4)}"
    b = pid.encode("utf-8")
    return b[-MAX_PICKER_ID_BYTES:].decode("utf-8", "ignore") if len(b) > MAX_PICKER_ID_BYTES else pid


def in_flight(picker: Picker, held: Sequence[Tuple[str, int, float, int]] = ()) -> List[pb.PickerReplicaLoad]:
    """What picker has in flight per replica, as a report lists it: for each
    replica with a request not done, the requests before their first token,
    their uncached prompt tokens (rounded) and the requests before done;
    replica id ascending. Replicas with nothing in flight are left out (a
    report replaces the previous one whole). held lists load left out, each
    (replica, prefilling requests, prefill tokens, running requests): the
    picks whose push is not answered yet (PickShare.held), clamped at 0."""
    with picker._mu:
        rows = {rid: [l.prefilling, l.queued_tokens, l.inflight] for rid, l in picker._replicas.items()}
    for rid, prefilling, tokens, running in held:
        r = rows.get(rid)
        if r is not None:
            r[0], r[1], r[2] = r[0] - prefilling, r[1] - tokens, r[2] - running
    rows = sorted((rid, max(0, p), max(0.0, q), max(0, n)) for rid, (p, q, n) in rows.items())
    rows = [r for r in rows if r[1] > 0 or r[2] > 0 or r[3] > 0]
    return [pb.PickerReplicaLoad(replica_id=rid, prefilling_requests=p,
                                 prefill_tokens=int(math.floor(q + 0.5)), running_requests=r)
            for rid, p, q, r in rows]


class _Reports:
    """The state both reporters share: the checked settings, the sequence
    (counted from the clock, so a picker restarted under the same id is ahead
    of its old reports) and the counters: sent counts reports a node
    accepted (or answered superseded), failed those that failed or timed out
    (dropped), superseded the sent ones a node answered superseded (it holds
    a higher sequence for this picker id, so another live picker reports
    under the same id and the cluster does not see this one's load; warned
    about at most once a minute)."""

    def __init__(self, picker: Picker, picker_id: Optional[str], interval: float) -> None:
        if picker is None:
            raise ValueError("load share: needs a Picker")
        picker_id = picker_id or default_picker_id()
        n = len(picker_id.encode("utf-8"))
        if n > MAX_PICKER_ID_BYTES:
            raise ValueError(f"picker_id: {n} bytes, over the limit of {MAX_PICKER_ID_BYTES}")
        interval = interval or DEFAULT_INTERVAL
        if not MIN_INTERVAL <= interval <= MAX_INTERVAL:
            raise ValueError(f"interval: {interval} s; must be {MIN_INTERVAL} to {MAX_INTERVAL} s")
        self.picker, self.picker_id, self.interval = picker, picker_id, interval
        self._seq = time.time_ns()
        self.sent = self.failed = self.superseded = 0
        self._warned_at = self._dup_warned_at = -math.inf
        self._held: Callable[[], Sequence[Tuple[str, int, float, int]]] = tuple

    def hold(self, held: Callable[[], Sequence[Tuple[str, int, float, int]]]) -> None:
        """Leave the requests held() lists out of every report from now on
        (PickShare passes its picks not pushed yet, so that a lookup never
        sees a pick's load before the pick, contract §5.12)."""
        self._held = held

    def request(self, empty: bool = False) -> pb.ReportPickerLoadRequest:
        self._seq += 1
        return pb.ReportPickerLoadRequest(picker_id=self.picker_id, sequence=self._seq,
                                          interval_ms=round(self.interval * 1000),
                                          loads=[] if empty else in_flight(self.picker, self._held()))

    def outcome(self, req: pb.ReportPickerLoadRequest, resp, err: Optional[BaseException]) -> None:
        if err is None:
            self.sent += 1
            if getattr(resp, "superseded", False):
                # One process's sequences only increase: the node holds a
                # higher one from another picker under the same id.
                self.superseded += 1
                now = time.monotonic()
                if now - self._dup_warned_at >= WARN_EVERY:
                    self._dup_warned_at = now
                    log.warning("picker load report superseded: another picker reports under the same picker_id "
                                "(give each gateway its own picker id, or leave it empty), so the cluster does not "
                                "see this one's load: picker_id=%s sequence=%d superseded_so_far=%d",
                                self.picker_id, req.sequence, self.superseded)
            return
        self.failed += 1
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            log.warning("picker load report failed; the other pickers see this one's load only once a report "
                        "succeeds (requests are unaffected): picker_id=%s err=%s failed_so_far=%d",
                        self.picker_id, err, self.failed)


class LoadShare(_Reports):
    """Reports picker's load through client (a blocking Client) every interval
    seconds from a daemon thread, each report bounded by the interval. stop()
    cancels the report in flight (through Client.report_picker_load_future;
    a client with only report_picker_load is waited out), sends a last, empty
    report bounded by the interval and STOP_TIMEOUT (so the others stop
    counting this picker at once, not at expiry) and joins the thread.
    Raises ValueError naming picker_id or interval when out of bounds."""

    def __init__(self, picker: Picker, client, picker_id: Optional[str] = None,
                 interval: float = DEFAULT_INTERVAL) -> None:
        super().__init__(picker, picker_id, interval)
        self._client = client
        self._stop = threading.Event()
        self._mu = threading.Lock()
        self._inflight = None  # the future of the report in flight, cancelled by stop()
        self._thread = threading.Thread(target=self._run, name="inference-cache-loadshare", daemon=True)
        self._thread.start()

    def _send(self, empty: bool = False) -> None:
        req = self.request(empty)
        timeout = min(self.interval, STOP_TIMEOUT) if empty else self.interval
        future = getattr(self._client, "report_picker_load_future", None)
        try:
            if future is None:
                resp = self._client.report_picker_load(req, timeout=timeout)
            else:
                f = future(req, timeout=timeout)
                with self._mu:
                    self._inflight = None if empty else f
                    if self._stop.is_set() and not empty:
                        f.cancel()
                try:
                    resp = f.result()
                finally:
                    with self._mu:
                        self._inflight = None
        except Exception as e:  # dropped: the next report replaces it
            if not empty and self._stop.is_set():
                return  # cancelled by stop(): superseded by the last report, not a failure
            self.outcome(req, None, e)
        else:
            self.outcome(req, resp, None)

    def _run(self) -> None:
        self._send()
        while not self._stop.wait(self.interval):
            self._send()
        self._send(empty=True)

    def stop(self) -> None:
        """End the reports (idempotent): returns within about STOP_TIMEOUT
        (1 s) even when a node holds every report."""
        with self._mu:
            self._stop.set()
            if self._inflight is not None:
                self._inflight.cancel()
        self._thread.join()

    def __enter__(self) -> "LoadShare":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class AsyncLoadShare(_Reports):
    """LoadShare for asyncio: reports through an AsyncClient from a task of
    the running loop (create it inside the loop); await stop(), which
    cancels the report in flight and bounds the last one as LoadShare's."""

    def __init__(self, picker: Picker, client, picker_id: Optional[str] = None,
                 interval: float = DEFAULT_INTERVAL) -> None:
        super().__init__(picker, picker_id, interval)
        self._client = client
        self._stopping = asyncio.Event()
        self._inflight: Optional[asyncio.Task] = None  # the report in flight, cancelled by stop()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _send(self, empty: bool = False) -> None:
        req = self.request(empty)
        timeout = min(self.interval, STOP_TIMEOUT) if empty else self.interval
        call = asyncio.ensure_future(self._client.report_picker_load(req, timeout=timeout))
        if not empty:
            self._inflight = call
        try:
            # wait() (unlike await) returns when call is cancelled by stop().
            await asyncio.wait({call})
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            self._inflight = None
        if call.cancelled():
            return  # cancelled by stop(): superseded by the last report, not a failure
        err = call.exception()
        if isinstance(err, Exception):
            self.outcome(req, None, err)
        elif err is None:
            self.outcome(req, call.result(), None)
        else:
            raise err

    async def _run(self) -> None:
        await self._send()
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval)
                break
            except asyncio.TimeoutError:
                await self._send()
        await self._send(empty=True)

    async def stop(self) -> None:
        """End the reports (idempotent): returns within about STOP_TIMEOUT
        (1 s) even when a node holds every report."""
        self._stopping.set()
        if self._inflight is not None:
            self._inflight.cancel()
        await self._task
