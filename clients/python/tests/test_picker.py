"""The picker against the shared, hand-worked table client/testdata/picker_cases.json
(the Go picker's test replays the same table, so the two cannot drift)."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from conftest import PICKER_CASES_PATH
from inference_cache.picker import (DEFAULT_CACHE_AFFINITY, DEFAULT_DECODE_WEIGHT, DEFAULT_KV_WEIGHT, DEFAULT_LOAD_BOUND,
                                    DEFAULT_LOAD_BOUND_FLOOR, DEFAULT_RUNNING_WEIGHT, DEFAULT_TEMPERATURE, Picker,
                                    PickerConfig, _fnv1a64, _splitmix64, rendezvous_key)
from inference_cache.v1 import inferencecache_pb2 as pb

with open(PICKER_CASES_PATH) as _f:
    CASES = json.load(_f)["cases"]

COST_FIELDS = ["cached_tokens", "uncached_tokens", "queued_tokens", "others_tokens", "repeated_tokens", "decode_tokens", "kv_tokens",
               "in_flight", "reported_waiting", "reported_running", "pressure", "others_prefilling",
               "others_prefill_tokens", "others_running", "others_pickers", "cost"]


def replay(case, seed):
    cfg = PickerConfig(seed=seed, **case.get("config", {}))
    p = Picker(cfg)
    started = {}
    for op in case["history"]:
        if op["op"] == "start":
            started[op["id"]] = p.start_on(op["replica"], op["uncached_tokens"])
        elif op["op"] == "first_token":
            started[op["id"]].first_token()
        elif op["op"] == "done":
            started[op["id"]].done()
        else:
            raise AssertionError(f"unknown history op {op['op']!r}")
    resp = None
    if case["response"] is not None:
        resp = json_format.ParseDict(case["response"], pb.LookupRouteResponse())
    return p.pick(resp, case["candidates"], case["prompt_tokens"], int(case.get("rendezvous_key", "0")))


def test_table_is_not_empty():
    assert len(CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_picker_table(case):
    want = case["expect"]
    for seed in (1, 2, 3):
        d = replay(case, seed)
        assert d.prompt_tokens == case["prompt_tokens"]
        if "one_of" in want:
            assert d.replica in want["one_of"], f"seed {seed}"
        else:
            assert d.replica == want["replica"], f"seed {seed}"
        if "index" in want:
            assert d.index == want["index"]
        elif d.replica:
            assert case["candidates"][d.index] == d.replica
        assert len(d.costs) == len(want["costs"])
        for got, w in zip(d.costs, want["costs"]):
            assert got.replica == w["replica"]
            assert pb.ReasonCode.Name(got.reason) == w["reason"], got.replica
            for f in COST_FIELDS:
                assert getattr(got, f) == pytest.approx(w.get(f, 0), abs=1e-9), f"{got.replica}.{f}"


@pytest.mark.parametrize("name", ["idle_no_hint_is_a_random_tie", "softmax_draws_among_near_equal_candidates"])
def test_random_ties_reach_every_tied_candidate(name):
    # The tie among idle replicas is at random (not always the first), and
    # the softmax draws among near-equal ones, so gateways that see the
    # same picture spread.
    case = next(c for c in CASES if c["name"] == name)
    seen = {replay(case, seed).replica for seed in range(1, 40)}
    assert seen == set(case["expect"]["one_of"])


def test_defaults_are_the_go_pickers():
    cfg = PickerConfig()
    assert (cfg.cache_affinity, cfg.running_weight, cfg.tokens_per_waiting_request, cfg.decode_weight, cfg.kv_weight,
            cfg.load_bound, cfg.temperature, cfg.load_bound_floor, cfg.cache_affinity_tokens,
            cfg.cache_affinity_load) == (1, 0, 0, 0, 1, 1.5, 0, 8, 0, 0.5)
    assert DEFAULT_LOAD_BOUND_FLOOR == 8
    assert (DEFAULT_CACHE_AFFINITY, DEFAULT_RUNNING_WEIGHT, DEFAULT_DECODE_WEIGHT, DEFAULT_KV_WEIGHT, DEFAULT_LOAD_BOUND,
            DEFAULT_TEMPERATURE) == (1, 0, 0, 1, 1.5, 0)


def test_start_of_a_decision_queues_its_uncached_tokens_until_the_first_token():
    p = Picker(PickerConfig(seed=1))
    resp = pb.LookupRouteResponse(reason_code=pb.PREFIX_MATCH,
                                  replicas=[pb.ReplicaHint(replica_id="r1", matched_tokens=40)])
    d = p.pick(resp, ["r1", "r2"], 100)
    assert d.replica == "r1"
    fl = p.start(d)
    after = p.pick(None, ["r1", "r2"], 10)
    assert after.costs[0].queued_tokens == 60 and after.costs[0].in_flight == 1
    fl.first_token()
    fl.done()
    idle = p.pick(None, ["r1", "r2"], 10)
    assert idle.costs[0].queued_tokens == 0 and idle.costs[0].in_flight == 0
    empty = p.pick(resp, [], 10)
    p.start(empty).done()  # does nothing, raises nothing


def test_rendezvous_hashes_match_their_references():
    # FNV-1a 64 test vectors ("a", "foobar") and SplitMix64's first output
    # from state 0, the published reference values.
    assert _fnv1a64("") == 0xCBF29CE484222325
    assert _fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert _fnv1a64("foobar") == 0x85944171F73967E8
    assert _splitmix64(0) == 0xE220A8397B1DCDAF


def test_rendezvous_key_takes_the_leading_blocks():
    hs = [11, 12, 13, 14, 15, 16]
    assert rendezvous_key([], 16) == 0
    assert rendezvous_key(hs, 0) == 0
    assert rendezvous_key(hs, 512) == 14
    assert rendezvous_key(hs, 4096) == 11
    assert rendezvous_key(hs, 16) == 16
    assert rendezvous_key([0, 0], 1024) == 1


def test_keyed_picks_agree_across_seeds():
    cands = ["a", "b", "c", "d"]
    for key in range(1, 60):
        picks = {Picker(PickerConfig(seed=s)).pick(None, cands, 4000, key).replica for s in (1, 2, 3)}
        assert len(picks) == 1, key
