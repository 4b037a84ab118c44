"""The clients' fail-open and retry rules against scripted in-process gRPC
servers (the Go SDK's rules: client/client.go, write.go, nodes.go)."""

from __future__ import annotations

import asyncio
import re
import time

import grpc
import pytest

from fakes import FakeServer, Scripted, SilentListener, closed_port_addr, retry_info_status
from inference_cache import AsyncClient, Client, ClientConfig, WriteError, new_request_id
from inference_cache.v1 import inferencecache_pb2 as pb

KINDS = ["sync", "async"]


def call(kind, addrs, method, *args, **options):
    """Make one client of kind, call method(*args), return (result or the
    exception raised, the client's stats)."""
    if kind == "sync":
        with Client(addrs, **options) as c:
            try:
                out = getattr(c, method)(*args)
            except WriteError as e:
                out = e
            return out, c.stats()

    async def go():
        async with AsyncClient(addrs, **options) as c:
            try:
                out = await getattr(c, method)(*args)
            except WriteError as e:
                out = e
            return out, c.stats()

    return asyncio.run(go())


@pytest.fixture
def servers():
    made = []

    def make(**scripts):
        s = FakeServer(Scripted(**scripts))
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def ingest_req(request_id=""):
    return pb.IngestRequest(request_id=request_id, events=[pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id="r")])


def test_request_ids_are_128_bit_lower_hex_and_fresh():
    ids = {new_request_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


@pytest.mark.parametrize("kind", KINDS)
def test_unavailable_write_is_retried_on_another_node_with_the_same_request_id(kind, servers):
    a = servers(ingest=[(grpc.StatusCode.UNAVAILABLE, "not leader")])
    b = servers(ingest=[pb.IngestResponse(accepted=1, applied_index=7)])
    resp, st = call(kind, [a.addr, b.addr], "ingest", ingest_req(), sticky_writes=True)
    assert isinstance(resp, pb.IngestResponse) and resp.applied_index == 7
    ids = [c[1].request_id for c in a.calls("Ingest") + b.calls("Ingest")]
    assert len(ids) == 2 and ids[0] == ids[1] and re.fullmatch(r"[0-9a-f]{32}", ids[0])
    assert st.write_retries == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_given_request_id_is_kept(kind, servers):
    a = servers()
    call(kind, [a.addr], "ingest", ingest_req("my-write-1"))
    assert [c[1].request_id for c in a.calls("Ingest")] == ["my-write-1"]


@pytest.mark.parametrize("kind", KINDS)
def test_refused_write_is_not_retried(kind, servers):
    a = servers(ingest=[(grpc.StatusCode.INVALID_ARGUMENT, "request id reused for a different payload")])
    b = servers()
    err, st = call(kind, [a.addr, b.addr], "ingest", ingest_req(), sticky_writes=True)
    assert isinstance(err, WriteError) and err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.message == "request id reused for a different payload" and err.addr == a.addr
    assert len(a.calls("Ingest")) == 1 and not b.calls("Ingest") and st.write_retries == 0


@pytest.mark.parametrize("kind", KINDS)
def test_resource_exhausted_waits_the_retry_info_delay_then_retries(kind, servers):
    busy = (grpc.StatusCode.RESOURCE_EXHAUSTED, "write admission: node busy",
            (("grpc-status-details-bin", retry_info_status(8, 0, 200_000_000)),))
    a = servers(ingest=[busy, pb.IngestResponse(accepted=1)])
    t0 = time.monotonic()
    resp, st = call(kind, [a.addr], "ingest", ingest_req())
    assert isinstance(resp, pb.IngestResponse) and resp.accepted == 1
    assert time.monotonic() - t0 >= 0.2, "retried before the 200 ms the RetryInfo asked for"
    ids = [c[1].request_id for c in a.calls("Ingest")]
    assert len(ids) == 2 and ids[0] == ids[1] and st.write_retries == 1


@pytest.mark.parametrize("kind", KINDS)
def test_resource_exhausted_without_retry_info_is_not_retried(kind, servers):
    a = servers(ingest=[(grpc.StatusCode.RESOURCE_EXHAUSTED, "message too large")])
    err, _ = call(kind, [a.addr], "ingest", ingest_req())
    assert isinstance(err, WriteError) and err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(a.calls("Ingest")) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_write_gives_up_when_write_retry_is_spent(kind, servers):
    a = servers(ingest=[(grpc.StatusCode.UNAVAILABLE, "no leader")])
    t0 = time.monotonic()
    err, st = call(kind, [a.addr], "ingest", ingest_req(), write_retry=0.4)
    took = time.monotonic() - t0
    assert isinstance(err, WriteError) and err.code == grpc.StatusCode.UNAVAILABLE
    assert took < 0.4 + 0.5, f"gave up after {took:.2f}s, budget 0.4s"
    ids = {c[1].request_id for c in a.calls("Ingest")}
    assert len(a.calls("Ingest")) >= 3 and len(ids) == 1 and err.request_id in ids
    assert st.write_retries == len(a.calls("Ingest")) - 1


@pytest.mark.parametrize("kind", KINDS)
def test_write_to_a_hung_node_is_abandoned_after_its_health_check_fails(kind, servers):
    hung = SilentListener()
    try:
        b = servers()
        t0 = time.monotonic()
        resp, st = call(kind, [hung.addr, b.addr], "ingest", ingest_req(), sticky_writes=True,
                        write_probe_after=0.2, probe_timeout=0.2, write_attempt_timeout=3.0)
        took = time.monotonic() - t0
    finally:
        hung.stop()
    assert isinstance(resp, pb.IngestResponse)
    assert st.write_timeouts == 1 and st.write_retries == 1
    assert took < 2.0, f"took {took:.2f}s: the attempt was not abandoned before its 3 s timeout"


@pytest.mark.parametrize("kind", KINDS)
def test_report_replica_stats_carries_a_request_id(kind, servers):
    a = servers()
    resp, _ = call(kind, [a.addr], "report_replica_stats",
                   pb.ReportReplicaStatsRequest(stats=[pb.ReplicaStats(replica_id="r")]))
    assert resp.accepted == 1
    (_, req, _), = a.calls("ReportReplicaStats")
    assert re.fullmatch(r"[0-9a-f]{32}", req.request_id)


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_fails_over_to_another_node_once(kind, servers):
    b = servers(lookup=[pb.LookupRouteResponse(reason_code=pb.PREFIX_MATCH, served_by="b")])
    resp, st = call(kind, [closed_port_addr(), b.addr], "lookup_route", pb.LookupRouteRequest(prefix_hash=1),
                    lookup_timeout=2.0)
    # Round robin starts at the second node; a second lookup would start at
    # the first. Either way the answer is b's.
    assert resp.reason_code == pb.PREFIX_MATCH and resp.served_by == "b"
    assert st.fail_open == 0


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_refused_by_the_node_fails_open_without_retry(kind, servers):
    a = servers(lookup=[(grpc.StatusCode.UNAUTHENTICATED, "missing bearer token")])
    b = servers(lookup=[(grpc.StatusCode.UNAUTHENTICATED, "missing bearer token")])
    resp, st = call(kind, [a.addr, b.addr], "lookup_route", pb.LookupRouteRequest(prefix_hash=1),
                    lookup_timeout=2.0)
    assert resp.reason_code == pb.NO_HINT
    assert resp.detail == "client: Unauthenticated: missing bearer token; failing open"
    assert len(a.calls("LookupRoute")) + len(b.calls("LookupRoute")) == 1
    assert (st.lookups, st.fail_open, st.lookup_retries) == (1, 1, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_of_hung_nodes_is_no_hint_within_its_deadline(kind):
    hung = [SilentListener(), SilentListener()]
    try:
        t0 = time.monotonic()
        resp, st = call(kind, [h.addr for h in hung], "lookup_route", pb.LookupRouteRequest(prefix_hash=1),
                        lookup_timeout=0.3)
        took = time.monotonic() - t0
    finally:
        for h in hung:
            h.stop()
    assert resp.reason_code == pb.NO_HINT and resp.detail.startswith("client: DeadlineExceeded: ")
    assert resp.detail.endswith("; failing open")
    assert took < 0.3 + 0.25, f"NO_HINT after {took:.2f}s, deadline 0.3s"
    assert st.fail_open == 1


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_tokens_fingerprints_locally(kind, servers):
    a = servers()
    req = pb.LookupRouteRequest(model_id="m", cache_salt="s", token_ids=[9], prompt_text="x")
    resp, _ = call(kind, [a.addr], "lookup_tokens", req, list(range(40)), 16)
    assert resp.reason_code == pb.PREFIX_MATCH
    (_, sent, _), = a.calls("LookupRoute")
    from inference_cache import fingerprint
    fp = fingerprint(list(range(40)), 16, "s")
    assert list(sent.block_hashes) == fp.block_hashes and sent.prefix_hash == fp.prefix_hash
    assert list(sent.block_token_counts) == [16, 16] and not sent.token_ids and not sent.prompt_text


@pytest.mark.parametrize("kind", KINDS)
def test_lookup_tokens_with_a_bad_block_size_is_no_hint_naming_it(kind, servers):
    a = servers()
    resp, st = call(kind, [a.addr], "lookup_tokens", pb.LookupRouteRequest(), [1, 2], 0)
    assert resp.reason_code == pb.NO_HINT
    assert resp.detail == "client: block_size 0: must be between 1 and 4096"
    assert not a.calls("LookupRoute") and st.fail_open == 1


@pytest.mark.parametrize("kind", KINDS)
def test_bearer_token_is_sent_on_every_call(kind, servers):
    a = servers()
    call(kind, [a.addr], "lookup_route", pb.LookupRouteRequest(prefix_hash=1), bearer_token="tok", lookup_timeout=2.0)
    call(kind, [a.addr], "ingest", ingest_req(), bearer_token="tok")
    for _, _, md in a.calls("LookupRoute") + a.calls("Ingest"):
        assert md.get("authorization") == "Bearer tok"


@pytest.mark.parametrize("bad,msg", [
    (dict(addrs=[]), "addrs: at least one address is required"),
    (dict(addrs=["http://127.0.0.1:7401"]), "addrs[0] 'http://127.0.0.1:7401': must be host:port (no scheme)"),
    (dict(addrs=["a:1"], lookup_timeout=0), "lookup_timeout 0: must be a positive number of seconds"),
    (dict(addrs=["a:1"], write_probe_after=0), "write_probe_after 0: must be positive seconds, or negative for no health checks"),
])
def test_bad_config_names_the_field(bad, msg):
    with pytest.raises(ValueError) as e:
        ClientConfig(**bad)
    assert str(e.value) == msg


def test_addrs_may_be_one_comma_separated_string():
    assert ClientConfig(addrs="a:1, b:2").addrs == ["a:1", "b:2"]


@pytest.mark.parametrize("kind", KINDS)
def test_lookups_fail_open_at_once_while_every_node_is_skipped(kind):
    """Once each hung node has failed a lookup, the lookups that follow
    call no node (their detail says every node is skipped) until a node's
    skip period ends: a cluster that is out costs requests no budget."""
    hung = [SilentListener(), SilentListener()]
    opts = dict(lookup_timeout=0.3, fail_backoff=3600.0)
    req = pb.LookupRouteRequest(prefix_hash=1)

    async def run_async():
        async with AsyncClient([h.addr for h in hung], **opts) as c:
            return [await c.lookup_route(req) for _ in range(6)], c.stats()

    try:
        if kind == "sync":
            with Client([h.addr for h in hung], **opts) as c:
                resps, st = [c.lookup_route(req) for _ in range(6)], c.stats()
        else:
            resps, st = asyncio.run(run_async())
    finally:
        for h in hung:
            h.stop()
    assert all(r.reason_code == pb.NO_HINT and r.detail.endswith("; failing open") for r in resps)
    assert all("DeadlineExceeded" in r.detail for r in resps[:2]), [r.detail for r in resps[:2]]
    assert all("every node is skipped" in r.detail for r in resps[2:]), [r.detail for r in resps[2:]]
    assert (st.lookups, st.fail_open) == (6, 6)
