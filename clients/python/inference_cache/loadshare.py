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

Turns (contract §5.13): a lookup with take_turn and the picker id gets a
turn (LookupRouteResponse.turn) at the first node by address, where the
reports go too. The turn ends when a report settles it: the pick's own push
carries one (PickShare.start(..., turn=resp.turn)); a decision without a
pick to push hands its turn to settle(), and the next report settles it.
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
#: The node's bound on the turns one report settles (settled_turns).
MAX_SETTLED_TURNS = 1024
#: The bound (seconds) on the periodic reports' wait for a push that carries
#: a report (carried): past it they go out again, so a push whose answer is
#: never reported cannot silence the picker's load (Go carriedHoldMax).
CARRIED_HOLD_MAX = 1.0

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
    about at most once a minute), held_reports the periodic reports not sent
    because a push carried the picker's report (carried)."""

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
        self.sent = self.failed = self.superseded = self.held_reports = 0
        self._warned_at = self._dup_warned_at = -math.inf
        self._held: Callable[[], Sequence[Tuple[str, int, float, int]]] = tuple
        # Sequences and turns are taken by the reporter and by the pusher
        # (carried), each on its own thread.
        self._lock = threading.Lock()
        self._settle: List[int] = []  # turns the next report settles
        self._carried = 0  # reports handed to pushes not answered yet
        self._carried_at = 0.0  # monotonic, when the first of them was
        self._carried_seq = 0  # the highest sequence handed to a push
        self._closed = False  # stop() was called: no report is handed to a push

    def hold(self, held: Callable[[], Sequence[Tuple[str, int, float, int]]]) -> None:
        """Leave the requests held() lists out of every report from now on
        (PickShare passes its picks not pushed yet, so that a lookup never
        sees a pick's load before the pick, contract §5.12)."""
        self._held = held

    def settle(self, turn: int) -> None:
        """Have the next report settle turn (a LookupRouteResponse.turn; 0 is
        no turn), for a decision with no pick to push: one without block
        hashes, or abandoned before it was started. Never blocks; a turn
        not settled lapses at the node within 50 ms (contract §5.13)."""
        if type(turn) is not int or turn <= 0:
            return
        with self._lock:
            self._settle.append(turn)
            del self._settle[:-MAX_SETTLED_TURNS]

    def request(self, empty: bool = False) -> Optional[pb.ReportPickerLoadRequest]:
        """The next periodic report (empty: stop()'s last, with no load), with
        the turns waiting to be settled; None while a push carrying a report
        is unanswered (at most CARRIED_HOLD_MAX): a report sent meanwhile
        would carry a newer sequence without that push's picks' load, and a
        node would hold it in place of the carried one (counted in
        held_reports)."""
        with self._lock:
            if not empty and self._carried and time.monotonic() - self._carried_at < CARRIED_HOLD_MAX:
                self.held_reports += 1
                return None
            turns, self._settle = self._settle, []
            self._seq += 1
            seq = self._seq
        return pb.ReportPickerLoadRequest(picker_id=self.picker_id, sequence=seq,
                                          interval_ms=round(self.interval * 1000), settled_turns=turns,
                                          loads=[] if empty else in_flight(self.picker, self._held()))

    def carried(self, turns: Sequence[int],
                held: Sequence[Tuple[str, int, float, int]]) -> Optional[pb.ReportPickerLoadRequest]:
        """The report a picks push carries (SharePicksRequest.load, contract
        §5.12, §5.13): the picker's load with held (the picks not pushed yet,
        as PickShare.held lists them) left out, settling turns and those
        waiting for a report (at most MAX_SETTLED_TURNS, the latest), with
        this share's next sequence. The periodic reports wait until
        answered() is called (or CARRIED_HOLD_MAX passed). Sends nothing;
        None once stop() was called (its last, empty report ends the picker's
        load, which a later one would bring back)."""
        loads = in_flight(self.picker, held)
        with self._lock:
            if self._closed:
                return None
            all_turns = self._settle + [t for t in turns if type(t) is int and t > 0]
            self._settle = []
            self._seq += 1
            seq = self._carried_seq = self._seq
            if not self._carried:
                self._carried_at = time.monotonic()
            self._carried += 1
        return pb.ReportPickerLoadRequest(picker_id=self.picker_id, sequence=seq,
                                          interval_ms=round(self.interval * 1000),
                                          settled_turns=all_turns[-MAX_SETTLED_TURNS:], loads=loads)

    def answered(self, req: pb.ReportPickerLoadRequest, ok: bool) -> None:
        """The push that carried req (a carried() report) was answered (ok)
        or failed: the periodic reports go on, and when it failed the next
        one settles req's turns instead."""
        with self._lock:
            self._carried = max(0, self._carried - 1)
            if not ok:
                self._settle = (list(req.settled_turns) + self._settle)[-MAX_SETTLED_TURNS:]

    def outcome(self, req: pb.ReportPickerLoadRequest, resp, err: Optional[BaseException]) -> None:
        if err is None:
            self.sent += 1
            if getattr(resp, "superseded", False) and req.sequence > self._carried_seq:
                # One process's sequences only increase: the node holds a
                # higher one from another picker under the same id (or from
                # a push that carried this picker's later report).
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
        if req is None:
            return  # held: a push carries the picker's load
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
        with self._lock:
            self._closed = True
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
        if req is None:
            return  # held: a push carries the picker's load
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
        with self._lock:
            self._closed = True
        self._stopping.set()
        if self._inflight is not None:
            self._inflight.cancel()
        await self._task
