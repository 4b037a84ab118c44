"""Shared in-flight load between pickers (contract §5.11), as the Go SDK's
client.LoadShare: a picker reports what it has in flight per replica every
interval, so that the other pickers' lookups with include_load see it in
ReplicaLoad.others_*. Reports fail open: one that fails or outlasts the
interval is dropped and the next replaces it; no request waits for one.

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
from typing import List, Optional

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

log = logging.getLogger("inference_cache.loadshare")


def default_picker_id() -> str:
    """A picker id unique to this process: hostname-pid-random (8 hex digits),
    its last MAX_PICKER_ID_BYTES bytes when longer."""
    host = socket.gethostname() or "picker"
    pid = f"{host}-{os.getpid()}-{secrets.token_hex(4)}"
    b = pid.encode("utf-8")
    return b[-MAX_PICKER_ID_BYTES:].decode("utf-8", "ignore") if len(b) > MAX_PICKER_ID_BYTES else pid


def in_flight(picker: Picker) -> List[pb.PickerReplicaLoad]:
    """What picker has in flight per replica, as a report lists it: for each
    replica with a request not done, the requests before their first token,
    their uncached prompt tokens (rounded) and the requests before done;
    replica id ascending. Replicas with nothing in flight are left out (a
    report replaces the previous one whole)."""
    with picker._mu:
        rows = [(rid, l.prefilling, l.queued_tokens, l.inflight) for rid, l in picker._replicas.items()
                if l.inflight > 0 or l.prefilling > 0 or l.queued_tokens > 0]
    rows.sort()
    return [pb.PickerReplicaLoad(replica_id=rid, prefilling_requests=max(0, p),
                                 prefill_tokens=max(0, int(math.floor(q + 0.5))), running_requests=max(0, r))
            for rid, p, q, r in rows]


class _Reports:
    """The state both reporters share: the checked settings, the sequence
    (counted from the clock, so a picker restarted under the same id is ahead
    of its old reports) and the counters."""

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
        self.sent = self.failed = 0
        self._warned_at = -math.inf

    def request(self, empty: bool = False) -> pb.ReportPickerLoadRequest:
        self._seq += 1
        return pb.ReportPickerLoadRequest(picker_id=self.picker_id, sequence=self._seq,
                                          interval_ms=round(self.interval * 1000),
                                          loads=[] if empty else in_flight(self.picker))

    def outcome(self, err: Optional[BaseException]) -> None:
        if err is None:
            self.sent += 1
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
    seconds from a daemon thread. stop() sends a last, empty report (so the
    others stop counting this picker at once, not at expiry) and joins the
    thread. Raises ValueError naming picker_id or interval when out of bounds."""

    def __init__(self, picker: Picker, client, picker_id: Optional[str] = None,
                 interval: float = DEFAULT_INTERVAL) -> None:
        super().__init__(picker, picker_id, interval)
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inference-cache-loadshare", daemon=True)
        self._thread.start()

    def _send(self, empty: bool = False) -> None:
        try:
            self._client.report_picker_load(self.request(empty), timeout=self.interval)
        except Exception as e:  # dropped: the next report replaces it
            self.outcome(e)
        else:
            self.outcome(None)

    def _run(self) -> None:
        self._send()
        while not self._stop.wait(self.interval):
            self._send()
        self._send(empty=True)

    def stop(self) -> None:
        """End the reports (idempotent)."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> "LoadShare":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class AsyncLoadShare(_Reports):
    """LoadShare for asyncio: reports through an AsyncClient from a task of
    the running loop (create it inside the loop); await stop()."""

    def __init__(self, picker: Picker, client, picker_id: Optional[str] = None,
                 interval: float = DEFAULT_INTERVAL) -> None:
        super().__init__(picker, picker_id, interval)
        self._client = client
        self._stopping = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _send(self, empty: bool = False) -> None:
        try:
            await self._client.report_picker_load(self.request(empty), timeout=self.interval)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.outcome(e)
        else:
            self.outcome(None)

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
        """End the reports (idempotent)."""
        self._stopping.set()
        await self._task
