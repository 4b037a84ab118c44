"""The Python clients against a real 3-node cluster of `inference-cache server` processes."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from inference_cache import AsyncClient, Client, fingerprint
from inference_cache.v1 import inferencecache_pb2 as pb

SCHEME, MODEL, TENANT = "vllm", "m", "t"


def stored(replica, tokens, **kw):
    return pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id=replica, hash_scheme=SCHEME, model_id=MODEL,
                         tenant_id=TENANT, token_ids=tokens, block_size=16, **kw)


def lookup_req(**kw):
    return pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, tenant_id=TENANT, **kw)


@pytest.fixture(scope="module", autouse=True)
def bystander(cluster):
    """A second replica in the serving set: with one replica alone, ranking v2's
    distinguishing power (1 − matching / serving replicas) is 0 and no
    prefix match is usable (contract §5.4)."""
    with Client(cluster.addrs) as c:
        c.ingest(pb.IngestRequest(events=[stored("r-bystander", list(range(900000, 900064)))]))


def wait_prefix_match(c, tokens, limit=10.0):
    """Look up until every node answers PREFIX_MATCH (the ingest is applied on the
    node that answered it; the others apply it a moment later)."""
    deadline = time.monotonic() + limit
    seen = {}
    while time.monotonic() < deadline:
        r = c.lookup_tokens(lookup_req(), tokens, 16)
        seen[r.served_by] = r
        if len(seen) == 3 and all(x.reason_code == pb.PREFIX_MATCH for x in seen.values()):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not PREFIX_MATCH on every node: {seen}")


def test_prefix_match_after_an_ingest_through_the_python_client(cluster):
    tokens = list(range(1000, 1128))  # 8 blocks of 16
    with Client(cluster.addrs, lookup_timeout=2.0) as c:
        assert c.lookup_tokens(lookup_req(), tokens, 16).reason_code != pb.PREFIX_MATCH
        resp = c.ingest(pb.IngestRequest(events=[stored("r-py", tokens)]))
        assert resp.accepted == 1 and not resp.rejected and not resp.duplicate
        answers = wait_prefix_match(c, tokens)
        for node, r in answers.items():
            assert [h.replica_id for h in r.replicas] == ["r-py"], node
            assert (r.replicas[0].matched_tokens, r.replicas[0].matched_blocks) == (128, 8), node
        # The server fingerprints token ids exactly as the client does: a
        # lookup by the server's own fingerprinting (token_ids) agrees.
        by_server = c.lookup_route(lookup_req(token_ids=tokens))
        assert by_server.reason_code == pb.PREFIX_MATCH and by_server.replicas[0].matched_tokens == 128
        # Salted: the events' chain and the lookup's are in another domain.
        assert c.lookup_tokens(lookup_req(cache_salt="other"), tokens, 16).reason_code != pb.PREFIX_MATCH
        assert c.stats().fail_open == 0


def test_ingest_by_block_hashes_the_client_computed(cluster):
    # The events carry hashes from the Python fingerprint, not token ids:
    # the server's lookups by token ids find them only if both agree bit for bit.
    tokens = list(range(7000, 7064))
    fp = fingerprint(tokens, 16)
    ev = pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id="r-hashes", hash_scheme=SCHEME, model_id=MODEL,
                       tenant_id=TENANT, block_hashes=fp.block_hashes, block_token_counts=fp.block_token_counts,
                       block_size=16)
    with Client(cluster.addrs, lookup_timeout=2.0) as c:
        assert c.ingest(pb.IngestRequest(events=[ev])).accepted == 1
        deadline = time.monotonic() + 10
        while True:
            r = c.lookup_route(lookup_req(token_ids=tokens))
            if r.reason_code == pb.PREFIX_MATCH or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.reason_code == pb.PREFIX_MATCH and r.replicas[0].replica_id == "r-hashes"


def test_retried_request_id_is_acknowledged_as_a_duplicate(cluster):
    tokens = list(range(3000, 3032))
    with Client(cluster.addrs) as c:
        first = c.ingest(pb.IngestRequest(request_id="py-dup-1", events=[stored("r-dup", tokens)]))
        again = c.ingest(pb.IngestRequest(request_id="py-dup-1", events=[stored("r-dup", tokens)]))
    assert not first.duplicate and again.duplicate and again.applied_index == first.applied_index


def test_async_client_under_200_concurrent_lookups(cluster):
    tokens = list(range(5000, 5064))

    async def go():
        async with AsyncClient(cluster.addrs, lookup_timeout=10.0) as c:
            await c.ingest(pb.IngestRequest(events=[stored("r-async", tokens)]))
            deadline = time.monotonic() + 10
            while True:  # every node has applied it
                rs = await asyncio.gather(*[c.lookup_tokens(lookup_req(), tokens, 16) for _ in range(3)])
                if all(r.reason_code == pb.PREFIX_MATCH for r in rs) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            rs = await asyncio.gather(*[c.lookup_tokens(lookup_req(), tokens, 16) for _ in range(200)])
            return rs, c.stats()

    rs, st = asyncio.run(go())
    assert len(rs) == 200
    bad = [r for r in rs if r.reason_code != pb.PREFIX_MATCH or r.replicas[0].replica_id != "r-async"]
    assert not bad, f"{len(bad)} of 200 lookups were not r-async's PREFIX_MATCH: {bad[:2]}"
    by_node = collections.Counter(r.served_by for r in rs)
    # Round robin over the three nodes: each serves a third (±1).
    assert sorted(by_node) == ["n1", "n2", "n3"] and all(66 <= v <= 67 for v in by_node.values()), by_node
    assert st.fail_open == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_no_hint_within_the_deadline_when_every_node_is_down(cluster_factory, kind):
    c3 = cluster_factory()
    timeout = 0.2

    def lookups(n):
        if kind == "sync":
            with Client(c3.addrs, lookup_timeout=timeout) as c:
                c.lookup_tokens(lookup_req(), list(range(32)), 16)  # connect while up
                out = []
                for _ in range(n):
                    t0 = time.monotonic()
                    r = c.lookup_tokens(lookup_req(), list(range(32)), 16)
                    out.append((r, time.monotonic() - t0))
                return out

        async def go():
            async with AsyncClient(c3.addrs, lookup_timeout=timeout) as c:
                await c.lookup_tokens(lookup_req(), list(range(32)), 16)
                out = []
                for _ in range(n):
                    t0 = time.monotonic()
                    r = await c.lookup_tokens(lookup_req(), list(range(32)), 16)
                    out.append((r, time.monotonic() - t0))
                return out

        return asyncio.run(go())

    # Paused (SIGSTOP): connections stay open and nothing answers, so the
    # deadline is what ends the lookup.
    for p in c3.procs:
        p.pause()
    try:
        paused = lookups(3)
    finally:
        for p in c3.procs:
            p.resume()
    # Killed: connections are refused; NO_HINT comes at once.
    for p in c3.procs:
        p.kill()
    killed = lookups(3)
    for r, took in paused + killed:
        assert r.reason_code == pb.NO_HINT and r.detail.endswith("; failing open"), r
        assert took < timeout + 0.25, f"NO_HINT after {took:.3f}s, deadline {timeout}s"
    # Paused nodes answer nothing: each lookup's call ends at the deadline
    # until every node has failed one; the lookups after that call none
    # and fail open at once.
    assert "DeadlineExceeded" in paused[0][0].detail, paused[0][0].detail
    assert all("DeadlineExceeded" in r.detail or "every node is skipped" in r.detail for r, _ in paused)


def test_salted_hashes_the_client_computed_match_the_servers_salted_fingerprint(cluster):
    # Events stored under Python's salted chain; lookups by token ids with the
    # same cache_salt are fingerprinted by the Go server (contract §3.4): they
    # match only if both salted chains agree bit for bit, and another salt
    # (or none) does not match.
    tokens, salt = list(range(8000, 8064)), "tenant-salt-ü"
    fp = fingerprint(tokens, 16, salt)
    ev = pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id="r-salted", hash_scheme=SCHEME, model_id=MODEL,
                       tenant_id=TENANT, block_hashes=fp.block_hashes, block_token_counts=fp.block_token_counts,
                       block_size=16)
    with Client(cluster.addrs, lookup_timeout=2.0) as c:
        assert c.ingest(pb.IngestRequest(events=[ev])).accepted == 1
        deadline = time.monotonic() + 10
        while True:
            r = c.lookup_route(lookup_req(token_ids=tokens, cache_salt=salt))
            if r.reason_code == pb.PREFIX_MATCH or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.reason_code == pb.PREFIX_MATCH and r.replicas[0].replica_id == "r-salted"
        assert r.replicas[0].matched_tokens == 64
        for other in ("another-salt", ""):
            o = c.lookup_route(lookup_req(token_ids=tokens, cache_salt=other))
            assert not any(h.replica_id == "r-salted" and o.reason_code == pb.PREFIX_MATCH for h in o.replicas), other
