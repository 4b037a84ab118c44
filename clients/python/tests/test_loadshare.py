"""Sharing a picker's in-flight load (contract §5.11): the report's rows by
hand, the settings' bounds, and two pickers against a real 3-node cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time

import pytest

from inference_cache import AsyncClient, AsyncLoadShare, Client, LoadShare, Picker, in_flight
from fakes import SilentListener
from inference_cache.loadshare import MAX_PICKER_ID_BYTES, _Reports, default_picker_id
from inference_cache.v1 import inferencecache_pb2 as pb

SCHEME, MODEL, TENANT = "vllm", "m-share", "t"


def test_in_flight_lists_each_replica_with_work_by_hand():
    p = Picker()
    a = p.start_on("r-b", 1000)  # prefilling
    b = p.start_on("r-a", 300)
    b.first_token()  # r-a: running, no longer prefilling
    c = p.start_on("r-a", 200)  # r-a: a second request, prefilling
    d = p.start_on("r-c", 50)
    d.first_token()
    d.done()  # r-c: nothing in flight any more
    got = [(x.replica_id, x.prefilling_requests, x.prefill_tokens, x.running_requests) for x in in_flight(p)]
    assert got == [("r-a", 1, 200, 2), ("r-b", 1, 1000, 1)]
    a.done()
    c.done()
    b.done()
    assert in_flight(p) == []


def test_settings_out_of_bounds_name_the_field_and_limit():
    with pytest.raises(ValueError, match=rf"picker_id: 129 bytes, over the limit of {MAX_PICKER_ID_BYTES}"):
        LoadShare(Picker(), client=None, picker_id="x" * 129)
    with pytest.raises(ValueError, match=r"interval: 0\.001 s; must be 0\.01 to 60\.0 s"):
        LoadShare(Picker(), client=None, interval=0.001)
    pid = default_picker_id()
    assert len(pid.encode()) <= MAX_PICKER_ID_BYTES and pid != default_picker_id()


class _Refusing:
    """A client whose every report fails: the reporter must drop, count and go on."""

    def __init__(self):
        self.calls = 0

    def report_picker_load(self, req, timeout):
        self.calls += 1
        raise RuntimeError("cluster down")


def test_failing_reports_are_dropped_and_counted_and_stop_still_returns():
    to = _Refusing()
    s = LoadShare(Picker(), to, picker_id="p", interval=0.01)
    deadline = time.monotonic() + 5
    while to.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.stop()
    assert to.calls >= 3 and s.failed == to.calls and s.sent == 0


class _Superseding:
    """A client whose every report is answered superseded (another picker
    holds a higher sequence under the same id): ReportPickerLoadResponse as
    in api/inferencecache/v1/inferencecache.proto."""

    def __init__(self):
        self.calls = 0

    def report_picker_load_future(self, req, timeout):
        self.calls += 1
        f = concurrent.futures.Future()
        f.set_result(pb.ReportPickerLoadResponse(superseded=True))
        return f


def test_superseded_reports_are_counted_and_warned_about_once_naming_the_picker_id(caplog):
    to = _Superseding()
    with caplog.at_level(logging.WARNING, logger="inference_cache.loadshare"):
        s = LoadShare(Picker(), to, picker_id="gw-shared", interval=0.01)
        deadline = time.monotonic() + 5
        while to.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        s.stop()
    # Every report, the last empty one too, was answered superseded.
    assert to.calls >= 3 and s.superseded == to.calls and s.sent == to.calls and s.failed == 0
    warned = [r.getMessage() for r in caplog.records if "superseded" in r.getMessage()]
    assert len(warned) == 1 and "picker_id=gw-shared" in warned[0], warned


def test_a_report_superseded_by_the_pickers_own_carried_report_is_no_duplicate():
    # A periodic report in flight when a push carried a later one may reach
    # the node after it and be answered superseded: that is this picker's
    # own newer report, not another picker under its id.
    s = _Reports(Picker(), "gw-a", 60)  # the reporters' shared state, without a thread
    older = s.request()
    carried = s.carried([], [])
    s.outcome(older, pb.ReportPickerLoadResponse(superseded=True), None)
    assert s.superseded == 0 and s.sent >= 1
    s.answered(carried, True)
    newer = s.request()
    s.outcome(newer, pb.ReportPickerLoadResponse(superseded=True), None)
    assert s.superseded == 1


def stop_within(stop, limit):
    """Run stop() on a thread; the seconds it took, or fail once limit passed."""
    t0, done = time.monotonic(), threading.Event()
    threading.Thread(target=lambda: (stop(), done.set()), daemon=True).start()
    assert done.wait(limit), f"stop() still running after {limit} s"
    return time.monotonic() - t0


def test_stop_cancels_the_report_a_hung_node_holds_and_bounds_the_last_one():
    hung = SilentListener()  # accepts the connection, never answers: every report waits for its deadline
    try:
        with Client([hung.addr], lookup_timeout=2.0) as c:
            s = LoadShare(Picker(), c, picker_id="p-hung", interval=60.0)
            deadline = time.monotonic() + 5
            while not hung.conns and time.monotonic() < deadline:  # the first report is on its way
                time.sleep(0.01)
            assert hung.conns
            took = stop_within(s.stop, 5.0)
    finally:
        hung.stop()
    # The first report was cancelled (not a failure); the last, empty one timed out after STOP_TIMEOUT (1 s).
    assert took < 2.5 and s.failed == 1 and s.sent == 0, (took, s.failed, s.sent)


def test_async_stop_cancels_the_report_a_hung_node_holds_and_bounds_the_last_one():
    hung = SilentListener()

    async def main():
        async with AsyncClient([hung.addr], lookup_timeout=2.0) as ac:
            s = AsyncLoadShare(Picker(), ac, picker_id="p-hung-async", interval=60.0)
            deadline = time.monotonic() + 5
            while not hung.conns and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert hung.conns
            t0 = time.monotonic()
            await asyncio.wait_for(s.stop(), 5.0)
            return time.monotonic() - t0, s.failed, s.sent

    try:
        took, failed, sent = asyncio.run(main())
    finally:
        hung.stop()
    assert took < 2.5 and failed == 1 and sent == 0, (took, failed, sent)


def stored(replica, tokens):
    return pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id=replica, hash_scheme=SCHEME, model_id=MODEL,
                         tenant_id=TENANT, token_ids=tokens, block_size=16)


def others(c, tokens, picker_id, replica):
    """The others_* of replica in a lookup for picker_id (None when not listed)."""
    req = pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, tenant_id=TENANT, include_load=True,
                                picker_id=picker_id)
    r = c.lookup_tokens(req, tokens, 16)
    for load in r.loads:
        if load.replica_id == replica:
            return (load.others_prefilling_requests, load.others_prefill_tokens, load.others_running_requests,
                    load.others_pickers)
    return None


def wait(f, want, limit=10.0):
    deadline, got = time.monotonic() + limit, None
    while time.monotonic() < deadline:
        got = f()
        if got == want:
            return
        time.sleep(0.02)
    raise AssertionError(f"got {got}, want {want}")


def test_another_picker_sees_the_load_on_every_node_and_not_its_own(cluster):
    tokens = list(range(5000, 5128))
    with Client(cluster.addrs, lookup_timeout=2.0) as c:
        # Two replicas hold the prefix, so the answer hints (and lists) r-share.
        c.ingest(pb.IngestRequest(events=[stored("r-share", tokens), stored("r-other", tokens[:64])]))
        p = Picker()
        req = p.start_on("r-share", 700)
        share = LoadShare(p, c, picker_id="py-a", interval=0.05)
        try:
            for addr in cluster.addrs:  # every node holds it
                with Client([addr], lookup_timeout=2.0) as one:
                    wait(lambda: others(one, tokens, "py-b", "r-share"), (1, 700, 1, 1))
            assert others(c, tokens, "py-a", "r-share") in (None, (0, 0, 0, 0)), "a picker's own load came back"
            req.first_token()
            wait(lambda: others(c, tokens, "py-b", "r-share"), (0, 0, 1, 1))
        finally:
            share.stop()
        # The last, empty report takes the load away at once, not at expiry.
        wait(lambda: others(c, tokens, "py-b", "r-share") in (None, (0, 0, 0, 0)), True, limit=2.0)
        assert share.sent >= 3 and share.failed == 0


def test_async_load_share_reports_through_the_async_client(cluster):
    tokens = list(range(6000, 6128))
    with Client(cluster.addrs, lookup_timeout=2.0) as c:
        c.ingest(pb.IngestRequest(events=[stored("r-async", tokens), stored("r-other", tokens[:64])]))

        async def main():
            async with AsyncClient(cluster.addrs, lookup_timeout=2.0) as ac:
                p = Picker()
                p.start_on("r-async", 40)
                share = AsyncLoadShare(p, ac, picker_id="py-async", interval=0.05)
                deadline = time.monotonic() + 10
                got = None
                while time.monotonic() < deadline:
                    got = others(c, tokens, "py-b", "r-async")
                    if got == (1, 40, 1, 1):
                        break
                    await asyncio.sleep(0.02)
                await share.stop()
                return got, share.sent

        got, sent = asyncio.run(main())
        assert got == (1, 40, 1, 1) and sent >= 1
