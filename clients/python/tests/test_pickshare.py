"""Sharing a gateway's picks as provisional residencies (contract §5.12): the
pushes by hand through a recording client, Client.share_picks against fake
nodes, and picks seen by another picker's lookups on a real 3-node cluster."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from inference_cache import AsyncClient, AsyncLoadShare, AsyncPickShare, Client, LoadShare, Picker, PickShare, fill_fingerprint
from inference_cache.loadshare import in_flight
from inference_cache.pickshare import DETAIL_ALSO_PROVISIONAL, MAX_BLOCKS_PER_PICK, pick_problem
from inference_cache.v1 import inferencecache_pb2 as pb
from fakes import FakeServer, Scripted, closed_port_addr

SCHEME, MODEL, TENANT = "vllm", "m-picks", "t"


def keyed(tokens, block_size=16, salt=""):
    """A lookup request for tokens with its block hashes set, as lookup_tokens leaves it."""
    req = pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, tenant_id=TENANT, cache_salt=salt,
                                adapter_id="lora-a")
    fill_fingerprint(req, tokens, block_size)
    return req


class Recording:
    """A client that records every push; share_picks blocks while gate is
    clear, and sets entered once it was called."""

    def __init__(self):
        self.pushes, self.lock = [], threading.Lock()
        self.gate, self.entered = threading.Event(), threading.Event()
        self.gate.set()

    def share_picks(self, req, timeout):
        self.entered.set()
        self.gate.wait(5)
        with self.lock:
            self.pushes.append(pb.SharePicksRequest.FromString(req.SerializeToString()))
        return pb.SharePicksResponse(added=len(req.picks))

    def report_picker_load(self, req, timeout):
        return pb.ReportPickerLoadResponse()

    def got(self, pred=lambda p: True):
        with self.lock:
            return [p for p in self.pushes if pred(p)]


def until(f, limit=5.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = f()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError("not within the limit")


def test_settings_out_of_bounds_name_the_field_and_limit():
    c = Recording()
    with pytest.raises(ValueError, match=r"picker_id: required"):
        PickShare(c, "")
    with pytest.raises(ValueError, match=r"picker_id: 129 bytes, over the limit of 128"):
        PickShare(c, "x" * 129)
    with pytest.raises(ValueError, match=r"full_state_interval: 0\.01 s; must be 0\.05 to 60\.0 s"):
        PickShare(c, "g", full_state_interval=0.01)
    with pytest.raises(ValueError, match=r"max_age: 700 s; must be 0\.1 to 600\.0 s"):
        PickShare(c, "g", max_age=700)
    with pytest.raises(ValueError, match=r"push_timeout: -1 s; must be above 0"):
        PickShare(c, "g", push_timeout=-1)


def test_a_pick_its_first_token_and_its_removal_are_pushed_as_they_happen():
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=60)
    try:
        tokens = list(range(100, 140))  # 2 full blocks of 16 (a partial block is not hashed)
        req = keyed(tokens)
        pid = s.add(req, "r1", cached_tokens=16, uncached_tokens=24)
        assert pid > 0
        push = until(lambda: c.got(lambda p: len(p.picks) > 0))[0]
        k = push.picks[0]
        assert (push.picker_id, push.full_state) == ("gw-a", False)
        assert (k.pick_id, k.replica_id, k.hash_scheme, k.model_id, k.tenant_id, k.adapter_id) == (
            pid, "r1", SCHEME, MODEL, TENANT, "lora-a")
        assert list(k.block_hashes) == list(req.block_hashes) and len(k.block_hashes) == 2
        assert list(k.block_token_counts) == []  # 16 each: none sent
        assert (k.cached_tokens, k.max_age_ms) == (16, 10000)
        # Blocks of another size go with their counts.
        s.add(keyed(list(range(100, 164)), block_size=32), "r1")
        k32 = until(lambda: c.got(lambda p: len(p.picks) > 0 and p.picks[0].pick_id != pid))[0].picks[0]
        assert list(k32.block_token_counts) == [32, 32]
        s.prefilled(pid)
        s.prefilled(pid)  # a second first token is not news
        until(lambda: c.got(lambda p: list(p.prefilled) == [pid]))
        s.remove(pid)
        until(lambda: c.got(lambda p: list(p.removed) == [pid]))
        s.remove(pid)  # removed already: nothing more
        time.sleep(0.05)
        seqs = [p.sequence for p in c.got()]
        assert len(seqs) == 4 and seqs == sorted(seqs) and len(set(seqs)) == 4, seqs
        assert s.pushes == 4 and s.failed == 0
    finally:
        s.stop()


def test_a_request_without_block_hashes_shares_nothing(caplog):
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=60)
    try:
        text = pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, prompt_text="keyed on the server")
        with caplog.at_level("WARNING", logger="inference_cache.pickshare"):
            assert s.add(text, "r1") == 0
        assert caplog.text == "", "a text prompt, which has no hashes to share, was warned about"
        long = pb.LookupRouteRequest(hash_scheme=SCHEME, block_hashes=list(range(1, MAX_BLOCKS_PER_PICK + 2)))
        assert s.add(long, "r1") == 0
        assert s.unshared == 2
    finally:
        s.stop()
    assert c.got() == []


def test_full_states_repair_with_hashes_for_the_recent_picks_only():
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=0.05)
    try:
        req = keyed(list(range(200, 232)))
        pid = s.add(req, "r2", uncached_tokens=32)
        s.prefilled(pid)
        fulls = until(lambda: (lambda f: f if len(f) >= 4 else None)(c.got(lambda p: p.full_state)))
        listed = [[k for k in f.picks if k.pick_id == pid] for f in fulls]
        assert all(len(x) == 1 for x in listed), "a live pick left out of a full state"
        first, later = listed[0][0], listed[3][0]
        assert list(first.block_hashes) == list(req.block_hashes) and first.prefilled
        # Past the two full states after it, a pick is listed by its id alone.
        assert list(later.block_hashes) == [] and later.replica_id == "r2" and later.prefilled
        assert later.age_ms >= first.age_ms
        assert fulls == sorted(fulls, key=lambda p: p.sequence)
    finally:
        s.stop()


def test_a_pick_expires_from_the_full_state_at_its_max_age_and_empty_states_stop():
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=0.05, max_age=0.1)
    try:
        s.add(keyed(list(range(300, 316))), "r1")
        until(lambda: c.got(lambda p: p.full_state and len(p.picks) == 0))
        n = len(c.got(lambda p: p.full_state))
        time.sleep(0.3)
        # One empty full state says the picks are gone; more would repair nothing.
        assert len(c.got(lambda p: p.full_state)) == n
    finally:
        s.stop()


def sharing(c):
    """A picker, its load share (reporting only when asked) and its pick share through c."""
    picker = Picker()
    load = LoadShare(picker, c, picker_id="gw-a", interval=60)
    return picker, load, PickShare(c, "gw-a", full_state_interval=60, load_share=load)


def rows(req):
    """A report's loads as (replica, prefilling, prefill tokens, running); None (held) has none."""
    return [(x.replica_id, x.prefilling_requests, x.prefill_tokens, x.running_requests)
            for x in (req.loads if req is not None else [])]


def test_a_picks_load_is_reported_with_its_push_and_the_reports_wait_for_it():
    # The pick's push carries the picker's report with the pick's load
    # (contract §5.12); no report has that load before it, and the periodic
    # reports wait while it is unanswered: sent meanwhile, one would carry a
    # newer sequence without the pick's load, and a node would hold it.
    c = Recording()
    picker, load, s = sharing(c)
    try:
        c.gate.clear()  # the node holds the push
        d = picker.pick(None, ["r1"], 64)
        flight = s.start(picker, d, keyed(list(range(400, 464))))
        assert flight.pick_id > 0
        c.entered.wait(5)
        assert load.request() is None and load.held_reports == 1
        c.gate.set()
        push = until(lambda: c.got(lambda p: len(p.picks) > 0))[0]
        assert push.load.picker_id == "gw-a" and rows(push.load) == [("r1", 1, 64, 1)]
        after = until(load.request)
        assert after.sequence > push.load.sequence and rows(after) == [("r1", 1, 64, 1)]
        flight.first_token()
        until(lambda: c.got(lambda p: list(p.prefilled) == [flight.pick_id]))
        flight.fail()
        until(lambda: c.got(lambda p: list(p.removed) == [flight.pick_id]))
        assert rows(load.request()) == []
    finally:
        c.gate.set()
        s.stop()
        load.stop()


def test_a_turn_is_settled_by_the_picks_push_or_else_by_the_next_report():
    # Contract §5.13: the lookup's turn ends with the pick's push, whose
    # report the node holds after the pick; a decision with no pick to push
    # (no full block) hands its turn to the next report. Each is settled once.
    c = Recording()
    picker, load, s = sharing(c)
    try:
        s.start(picker, picker.pick(None, ["r1"], 64), keyed(list(range(1400, 1464))), turn=7)
        push = until(lambda: c.got(lambda p: len(p.picks) > 0))[0]
        assert list(push.load.settled_turns) == [7]
        assert rows(push.load) == [("r1", 1, 64, 1)]
        no_hashes = pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL)
        assert s.start(picker, picker.pick(None, ["r1"], 8), no_hashes, turn=9).pick_id == 0
        report = until(load.request)
        assert list(report.settled_turns) == [9]
        assert list(load.request().settled_turns) == []
    finally:
        s.stop()
        load.stop()


def test_a_failed_carrying_push_leaves_its_turns_to_the_next_report():
    c = Failing()
    picker = Picker()
    load = LoadShare(picker, c, picker_id="gw-a", interval=60)
    s = PickShare(c, "gw-a", full_state_interval=60, load_share=load)
    try:
        s.start(picker, picker.pick(None, ["r1"], 64), keyed(list(range(1500, 1564))), turn=11)
        until(lambda: s.failed >= 1)
        report = until(load.request)  # held until the failure is handed back
        assert list(report.settled_turns) == [11]
    finally:
        s.stop()
        load.stop()


def test_a_stopped_load_share_hands_no_report_to_a_push():
    # Its last, empty report ended the picker's load at the nodes; a
    # carried one after it would bring the load back.
    c = Recording()
    picker, load, s = sharing(c)
    load.stop()
    try:
        s.start(picker, picker.pick(None, ["r1"], 64), keyed(list(range(1600, 1664))), turn=5)
        push = until(lambda: c.got(lambda p: len(p.picks) > 0))[0]
        assert not push.HasField("load")
    finally:
        s.stop()


def test_client_takes_turns_and_reports_at_the_first_node_by_address():
    # Gateways listing the same nodes take their turns at one node, and
    # settle them there with their reports (contract §5.13).
    a, b = FakeServer(Scripted()), FakeServer(Scripted())
    first, second = sorted([a, b], key=lambda x: x.addr)
    try:
        with Client([second.addr, first.addr], lookup_timeout=0.5) as c:
            for _ in range(4):
                c.lookup_route(pb.LookupRouteRequest(model_id="m", picker_id="g", take_turn=True))
                c.lookup_route(pb.LookupRouteRequest(model_id="m"))
                c.report_picker_load(pb.ReportPickerLoadRequest(picker_id="g", sequence=1), timeout=0.5)
            turns = [(x is first) for x in (a, b) for _, r, _ in x.calls("LookupRoute") if r.take_turn]
            plain = [x is first for x in (a, b) for _, r, _ in x.calls("LookupRoute") if not r.take_turn]
            assert turns == [True] * 4
            assert sorted(plain) == [False, False, True, True], "lookups without a turn go round robin"
            assert len(first.calls("ReportPickerLoad")) == 4 and second.calls("ReportPickerLoad") == []
    finally:
        a.stop()
        b.stop()


class Failing(Recording):
    def share_picks(self, req, timeout):
        raise RuntimeError("cluster down")


def test_failing_pushes_are_dropped_and_counted_and_stop_returns():
    c = Failing()
    s = PickShare(c, "gw-a", full_state_interval=0.05)
    s.add(keyed(list(range(500, 516))), "r1")
    until(lambda: s.failed >= 2)
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 1 and s.pushes == 0


def test_client_share_picks_goes_to_every_node_and_resends_a_missed_delta():
    a, b = FakeServer(Scripted()), FakeServer(Scripted())
    try:
        with Client([a.addr, b.addr, closed_port_addr()], lookup_timeout=0.5, fail_backoff=60) as c:
            delta = pb.SharePicksRequest(picker_id="g", sequence=1, picks=[pb.ProvisionalPick(pick_id=1)])
            assert c.share_picks(delta, timeout=0.5) is not None
            assert delta.sent_to_nodes == 0, "the caller's request was changed"
            sent = sorted([r.sent_to_nodes for _, r, _ in a.calls("SharePicks") + b.calls("SharePicks")])
            # Sent to 3; the closed port failed, so one answering node gets it
            # again with 0, to pass it on.
            assert sent == [0, 3, 3], sent
            full = pb.SharePicksRequest(picker_id="g", sequence=2, full_state=True)
            c.share_picks(full, timeout=0.5)
            # The closed port is in its backoff now: sent to 2, and a full
            # state is never sent again.
            got = sorted(r.sent_to_nodes for _, r, _ in a.calls("SharePicks") + b.calls("SharePicks")
                         if r.full_state)
            assert got == [2, 2], got
        with Client([closed_port_addr()], lookup_timeout=0.5) as c:
            with pytest.raises(Exception):
                c.share_picks(delta, timeout=0.5)
    finally:
        a.stop()
        b.stop()


def provisional_hint(c, tokens, replica):
    """Whether a lookup of tokens by another picker hints replica from a provisional residency."""
    req = pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, tenant_id=TENANT, adapter_id="lora-a",
                                picker_id="gw-b", include_load=True)
    r = c.lookup_tokens(req, tokens, 16)
    return any(h.replica_id == replica and h.provisional for h in r.replicas)


def test_another_gateway_sees_the_pick_on_every_node_before_any_event(cluster):
    tokens = list(range(7000, 7064))
    with Client(cluster.addrs, lookup_timeout=2.0) as c:
        picker = Picker()
        s = PickShare(c, "gw-a", full_state_interval=0.2)
        try:
            d = picker.pick(None, ["r-pick"], len(tokens))
            flight = s.start(picker, d, keyed(tokens))
            for addr in cluster.addrs:  # no KV event was ingested: only the pick says so
                with Client([addr], lookup_timeout=2.0) as one:
                    until(lambda: provisional_hint(one, tokens, "r-pick"))
            flight.fail()
            for addr in cluster.addrs:
                with Client([addr], lookup_timeout=2.0) as one:
                    until(lambda: not provisional_hint(one, tokens, "r-pick"))
        finally:
            s.stop()
        assert s.failed == 0 and s.pushes >= 2


class AsyncRecording:
    """An asyncio client that records every push; share_picks hangs while hang is set."""

    def __init__(self):
        self.pushes, self.hang = [], False

    async def share_picks(self, req, timeout):
        if self.hang:
            await asyncio.sleep(3600)
        self.pushes.append(pb.SharePicksRequest.FromString(req.SerializeToString()))
        return pb.SharePicksResponse(added=len(req.picks))


def test_async_pick_share_pushes_from_a_task_and_stop_cancels_a_hung_push():
    async def main():
        c = AsyncRecording()
        s = AsyncPickShare(c, "gw-async", full_state_interval=0.05)
        pid = s.add(keyed(list(range(600, 632))), "r3", cached_tokens=0, uncached_tokens=32)
        # From another thread too, as a thread pool's request handler would.
        other = await asyncio.get_running_loop().run_in_executor(
            None, lambda: s.add(keyed(list(range(700, 716))), "r1"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum(1 for p in c.pushes if p.full_state) < 2:
            await asyncio.sleep(0.01)
        added = sorted(k.pick_id for p in c.pushes if not p.full_state for k in p.picks)
        full = [p for p in c.pushes if p.full_state][-1]
        c.hang = True
        s.remove(pid)
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await s.stop()
        return added, sorted(k.pick_id for k in full.picks), pid, other, time.monotonic() - t0, s.held()

    added, full, pid, other, took, held = asyncio.run(main())
    assert added == sorted([pid, other]) and full == sorted([pid, other])
    assert took < 1, f"stop took {took:.2f} s with a hung push"
    assert held == []


def test_async_pick_share_settles_a_turn_in_the_picks_push():
    class Reporting(AsyncRecording):
        async def report_picker_load(self, req, timeout):
            return pb.ReportPickerLoadResponse()

    async def main():
        c = Reporting()
        picker = Picker()
        load = AsyncLoadShare(picker, c, picker_id="gw-async", interval=60)
        s = AsyncPickShare(c, "gw-async", full_state_interval=60, load_share=load)
        s.start(picker, picker.pick(None, ["r2"], 32), keyed(list(range(1700, 1732))), turn=3)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not [p for p in c.pushes if p.picks]:
            await asyncio.sleep(0.01)
        await s.stop()
        await load.stop()
        return [p for p in c.pushes if p.picks]

    pushes = asyncio.run(main())
    assert len(pushes) == 1
    assert list(pushes[0].load.settled_turns) == [3] and rows(pushes[0].load) == [("r2", 1, 32, 1)]


def test_async_pick_share_reaches_another_pickers_lookups(cluster):
    tokens = list(range(8000, 8064))

    async def main():
        async with AsyncClient(cluster.addrs, lookup_timeout=2.0) as ac:
            s = AsyncPickShare(ac, "gw-async-b", full_state_interval=0.2)
            picker = Picker()
            flight = s.start(picker, picker.pick(None, ["r-apick"], len(tokens)), keyed(tokens))
            with Client(cluster.addrs, lookup_timeout=2.0) as c:
                deadline, seen = time.monotonic() + 10, False
                while time.monotonic() < deadline and not seen:
                    seen = provisional_hint(c, tokens, "r-apick")
                    await asyncio.sleep(0.02)
            flight.fail()
            await asyncio.sleep(0.1)
            await s.stop()
            return seen, s.pushes, s.failed

    seen, pushes, failed = asyncio.run(main())
    assert seen and pushes >= 1 and failed == 0


def test_async_client_share_picks_goes_to_every_node_and_resends_a_missed_delta():
    a, b = FakeServer(Scripted()), FakeServer(Scripted())

    async def main():
        async with AsyncClient([a.addr, b.addr, closed_port_addr()], lookup_timeout=0.5, fail_backoff=60) as c:
            delta = pb.SharePicksRequest(picker_id="g", sequence=1, picks=[pb.ProvisionalPick(pick_id=1)])
            await c.share_picks(delta, timeout=0.5)
            await c.share_picks(pb.SharePicksRequest(picker_id="g", sequence=2, full_state=True), timeout=0.5)
            return delta.sent_to_nodes

    try:
        assert asyncio.run(main()) == 0, "the caller's request was changed"
        calls = [r for _, r, _ in a.calls("SharePicks") + b.calls("SharePicks")]
        assert sorted(r.sent_to_nodes for r in calls if not r.full_state) == [0, 3, 3]
        assert sorted(r.sent_to_nodes for r in calls if r.full_state) == [2, 2]
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("field,value,why", [
    ("model_id", "m" * 300, r"model_id: 300 bytes, over the limit of 256"),
    ("model_id", "m\n", r"model_id: holds control character U\+000A"),
    ("tenant_id", "t\u200b", r"tenant_id: holds invisible format character U\+200B"),
    ("adapter_id", "  ", r"adapter_id: blank"),
    ("hash_scheme", "", r"hash_scheme: required"),
])
def test_a_pick_the_server_would_refuse_is_not_recorded(field, value, why, caplog):
    # One refused pick fails its whole push, and the full states that
    # carry it: the good picks beside it would be lost with it.
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=60)
    try:
        req = keyed(list(range(900, 932)))
        setattr(req, field, value)
        with caplog.at_level("WARNING", logger="inference_cache.pickshare"):
            assert s.add(req, "r1") == 0
        assert s.unshared == 1 and re.search(why, caplog.text), caplog.text
        good = s.add(keyed(list(range(900, 932))), "r1")
        assert good > 0
        push = until(lambda: c.got(lambda p: len(p.picks) > 0))[0]
        assert [k.pick_id for k in push.picks] == [good]
    finally:
        s.stop()


def test_pick_problem_names_the_field_as_the_server_does():
    ok = pb.ProvisionalPick(pick_id=1, replica_id="r1", hash_scheme="vllm", block_hashes=[1, 2])
    assert pick_problem(ok) == ""
    bad = pb.ProvisionalPick(pick_id=1, replica_id="r1", hash_scheme="vllm", block_hashes=[1, 2],
                             block_token_counts=[16])
    assert pick_problem(bad) == "block_token_counts: 1 counts for 2 block_hashes"
    bad.block_token_counts.append(5000)
    assert pick_problem(bad) == "block_token_counts[1]: 5000: want 1 to 4096"
    assert pick_problem(pb.ProvisionalPick(hash_scheme="vllm", block_hashes=[1])) == "replica_id: required"


def test_bad_numbers_and_a_stopped_pusher_record_nothing_and_raise_nothing():
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=60)
    req = keyed(list(range(1000, 1032)))
    for kw in ({"cached_tokens": float("nan")}, {"uncached_tokens": None}, {"cached_tokens": "x"}):
        assert s.add(req, "r1", **kw) == 0
    assert s.add(None, "r1") == 0 and s.add(req, 7) == 0
    s.remove([1])
    s.prefilled("x")
    assert s.unshared == 5 and s._live == {} and s.held() == []
    s.stop()
    assert s.add(req, "r1") == 0 and s._live == {}


def test_the_live_picks_are_bounded(monkeypatch):
    import inference_cache.pickshare as ps

    monkeypatch.setattr(ps, "MAX_LIVE_BLOCKS", 4)
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=60)
    try:
        first = s.add(keyed(list(range(1100, 1148))), "r1")  # 3 blocks
        assert first > 0
        assert s.add(keyed(list(range(1200, 1232))), "r1") == 0  # 2 more: past 4
        s.remove(first)
        assert s.add(keyed(list(range(1200, 1232))), "r1") > 0
    finally:
        s.stop()


def test_held_load_follows_its_request():
    # A pick whose push is slow: its request gets its first token and ends
    # meanwhile. What is left out of the reports is what that request still
    # holds, never another request's load.
    c = Recording()
    picker, load, s = sharing(c)
    try:
        c.gate.clear()
        a = s.start(picker, picker.pick(None, ["r"], 100), keyed(list(range(1300, 1332))))
        b = picker.start_on("r", 50)
        # What a report sends once the wait for the carrying push has passed.
        left = lambda: rows(pb.ReportPickerLoadRequest(loads=in_flight(picker, s.held())))
        assert left() == [("r", 1, 50, 1)]
        a.first_token()
        assert left() == [("r", 1, 50, 1)]  # a, running, is still left out
        a.done()
        assert left() == [("r", 1, 50, 1)]
        b.done()
    finally:
        c.gate.set()
        s.stop()
        load.stop()


class ClosingClient(AsyncRecording):
    """Its first call is cancelled, as grpc.aio cancels the calls of a closed channel."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    async def share_picks(self, req, timeout):
        self.calls += 1
        if self.calls == 1:
            raise asyncio.CancelledError()
        return await super().share_picks(req, timeout)


def test_async_pusher_survives_a_cancelled_call_and_refuses_picks_once_its_loop_is_gone():
    async def main():
        c = ClosingClient()
        s = AsyncPickShare(c, "gw-async", full_state_interval=60)
        s.add(keyed(list(range(1400, 1416))), "r1")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and s.failed < 1:
            await asyncio.sleep(0.01)
        second = s.add(keyed(list(range(1500, 1516))), "r1")
        while time.monotonic() < deadline and not c.pushes:
            await asyncio.sleep(0.01)
        return s, c, second

    s, c, second = asyncio.run(main())
    assert s.failed == 1 and [k.pick_id for p in c.pushes for k in p.picks] == [second]
    # The loop is closed: nothing would push, so nothing is recorded, and
    # nothing raises.
    assert s.add(keyed(list(range(1600, 1616))), "r1") == 0
    s.remove(second)


def test_async_pick_share_outside_a_loop_says_so():
    with pytest.raises(RuntimeError, match="inside a running event loop"):
        AsyncPickShare(AsyncRecording(), "gw")


def chain_req(hashes, **kw):
    return pb.LookupRouteRequest(**{"hash_scheme": SCHEME, "model_id": MODEL, "tenant_id": TENANT,
                                    "block_hashes": hashes, **kw})


def hints(resp):
    return [(h.replica_id, h.matched_blocks, h.matched_tokens, h.provisional, h.repeated_prefill_tokens)
            for h in resp.replicas]


def test_own_picks_merge_into_the_answer_by_the_servers_rule():
    # Hand-worked from contract §5.12's merge rule.
    c = Recording()
    s = PickShare(c, "gw-a", full_state_interval=60)
    try:
        a = s.add(chain_req([11, 12, 13]), "r1", cached_tokens=0)
        # No answer (a lookup that failed open): the gateway's own pick
        # still places the request.
        got = s.merge(None, chain_req([11, 12, 99]))
        assert got.reason_code == pb.PREFIX_MATCH and got.detail.startswith("provisional prefix match")
        assert hints(got) == [("r1", 2, 32, True, 0)]
        # Another partition (a tenant) matches nothing, and the answer is
        # returned as it was.
        other = pb.LookupRouteResponse(reason_code=pb.AFFINITY_HINT)
        assert s.merge(other, chain_req([11, 12], tenant_id="t2")) is other
        # A confirmed hint at least as deep stands; a shallower one is
        # replaced; the answer keeps its detail with the suffix.
        confirmed = pb.LookupRouteResponse(reason_code=pb.PREFIX_MATCH, detail="d", replicas=[
            pb.ReplicaHint(replica_id="r2", matched_blocks=1, matched_tokens=16, score=16),
            pb.ReplicaHint(replica_id="r1", matched_blocks=1, matched_tokens=16, score=16)])
        got = s.merge(confirmed, chain_req([11, 12, 13]))
        assert hints(got) == [("r1", 3, 48, True, 0), ("r2", 1, 16, False, 0)]
        assert got.detail == "d" + DETAIL_ALSO_PROVISIONAL
        # A sibling placed on r1 blind to the first (cached 0 of its 48
        # tokens) repeats the 48 the first one computes; the first's own
        # first token does not change what the second repeats.
        b = s.add(chain_req([11, 12, 13]), "r1", cached_tokens=0)
        assert hints(s.merge(None, chain_req([11, 12, 13]))) == [("r1", 3, 48, True, 48)]
        s.prefilled(a)
        assert hints(s.merge(None, chain_req([11, 12, 13]))) == [("r1", 3, 48, True, 48)]
        s.prefilled(b)  # its prefill is done: it no longer queues
        assert hints(s.merge(None, chain_req([11, 12, 13]))) == [("r1", 3, 48, True, 0)]
        # Ordered by score and not cut (the node cut its answer): every
        # replica this gateway's picks reach counts for its next decision.
        s.add(chain_req([11]), "r3")
        got = s.merge(None, chain_req([11, 12, 13], max_replicas=1))
        assert [h.replica_id for h in got.replicas] == ["r1", "r3"]
        # The engine's events arrive: a confirmed hint as deep stands, and
        # the picks it covers whole are dropped, once pushed (a pick not
        # pushed yet goes out first); r3's pick, on another replica, stays.
        until(lambda: sum(len(p.picks) for p in c.got()) == 3)
        deep = pb.LookupRouteResponse(reason_code=pb.PREFIX_MATCH, detail="d", replicas=[
            pb.ReplicaHint(replica_id="r1", matched_blocks=3, matched_tokens=48, score=48)])
        assert hints(s.merge(deep, chain_req([11, 12, 13]))) == [("r1", 3, 48, False, 0), ("r3", 1, 16, True, 0)]
        assert hints(s.merge(None, chain_req([11, 12, 13]))) == [("r3", 1, 16, True, 0)]
    finally:
        s.stop()


def node_metric(http_addr, name):
    """The value of the unlabelled metric inferencecache_<name> at a node's /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://{http_addr}/metrics", timeout=2) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f"inferencecache_{name} "):
                return float(line.split()[1])
    raise AssertionError(f"no inferencecache_{name} at {http_addr}")


def test_two_python_gateways_take_turns_on_a_real_cluster(cluster_factory):
    # Contract §5.13 on real servers: gateway b's lookup, sent while gateway
    # a's turn is outstanding, waits at the first node by address until a's
    # pick's push settles the turn, and is answered with a's pick.
    c = cluster_factory(extra=["--turn-wait", "40ms"])
    first = min(c.procs, key=lambda p: p.grpc_addr)
    http = first.args[first.args.index("--http-addr") + 1]
    with Client(c.addrs, lookup_timeout=2.0) as ca, Client(c.addrs, lookup_timeout=2.0) as cb:
        pa, pb_ = Picker(), Picker()
        la = LoadShare(pa, ca, picker_id="gw-turn-a")
        lb = LoadShare(pb_, cb, picker_id="gw-turn-b")
        sa = PickShare(ca, "gw-turn-a", load_share=la)
        sb = PickShare(cb, "gw-turn-b", load_share=lb)
        waited = 0
        try:
            for i in range(8):
                tokens = list(range(20000 + 1000 * i, 20064 + 1000 * i))

                def lookup(picker_id):
                    req = pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, tenant_id=TENANT,
                                                adapter_id="lora-a", picker_id=picker_id, take_turn=True)
                    return req, (ca if picker_id == "gw-turn-a" else cb).lookup_tokens(req, tokens, 16)

                req_a, resp_a = lookup("gw-turn-a")
                assert resp_a.turn > 0, resp_a
                got = {}
                t = threading.Thread(target=lambda: got.update(zip("qr", lookup("gw-turn-b"))))
                t.start()
                deadline = time.monotonic() + 0.03
                while time.monotonic() < deadline and node_metric(http, "turns_waiting") < 1:
                    pass
                d = pa.pick(resp_a, ["r-a", "r-b"], len(tokens))
                sa.start(pa, d, req_a, turn=resp_a.turn).done()
                t.join(5)
                resp_b = got["r"]
                if resp_b.turn > 0 and resp_b.turn_wait_us > 0:
                    waited += 1
                    assert any(h.replica_id == d.replica and h.provisional for h in resp_b.replicas), resp_b
                sb.start(pb_, pb_.pick(resp_b, ["r-a", "r-b"], len(tokens)), got["q"], turn=resp_b.turn).done()
                until(lambda: node_metric(http, "turns_outstanding") == 0)
        finally:
            sa.stop()
            sb.stop()
            la.stop()
            lb.stop()
        assert waited >= 1, "b's lookup never waited for a's turn"
