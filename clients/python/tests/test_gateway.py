"""The example gateway (examples/gateway.py) routing OpenAI requests to
backends with a real cluster's hints, and failing open without one."""

from __future__ import annotations

import http.client
import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import PYTHON_DIR
from inference_cache import Client, LoadShare, Picker, PickerConfig, PickShare
from inference_cache.v1 import inferencecache_pb2 as pb
from fakes import closed_port_addr

_spec = importlib.util.spec_from_file_location("gateway", PYTHON_DIR / "examples" / "gateway.py")
gateway = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gateway)


class Backend:
    """A fake OpenAI backend: records request bodies; streams two SSE chunks when asked."""

    def __init__(self, name):
        self.name, self.bodies = name, []
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append((self.path, body))
                self.send_response(200)
                if body.get("stream"):
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for i in range(2):
                        self.wfile.write(f'data: {{"backend": "{outer.name}", "i": {i}}}\n\n'.encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                data = json.dumps({"backend": outer.name, "choices": [{"text": "ok"}]}).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def fleet():
    bs = {n: Backend(n) for n in ("r0", "r1", "r2")}
    yield bs
    for b in bs.values():
        b.stop()


def start_gateway(cluster_addrs, fleet, lookup_timeout=2.0):
    client = Client(cluster_addrs, lookup_timeout=lookup_timeout)
    gw = gateway.Gateway(client, Picker(PickerConfig(seed=1)), {n: b.url for n, b in fleet.items()}, "m", "vllm",
                         "t", 16, 30)
    srv = gateway.serve(gw, "127.0.0.1:0")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, client


def post(srv, path, body):
    conn = http.client.HTTPConnection(*srv.server_address, timeout=30)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


def test_token_prompt_goes_to_the_backend_holding_its_prefix(cluster, fleet):
    tokens = list(range(20000, 20128))
    with Client(cluster.addrs) as c:
        c.ingest(pb.IngestRequest(events=[
            pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id=rid, hash_scheme="vllm", model_id="m", tenant_id="t",
                          token_ids=toks, block_size=16)
            for rid, toks in (("r2", tokens), ("r0", list(range(30000, 30032))))]))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until every node has applied the ingest
            req = pb.LookupRouteRequest(hash_scheme="vllm", model_id="m", tenant_id="t")
            if all(c.lookup_tokens(req, tokens, 16).reason_code == pb.PREFIX_MATCH for _ in range(3)):
                break
            time.sleep(0.05)
    srv, client = start_gateway(cluster.addrs, fleet)
    try:
        status, headers, body = post(srv, "/v1/completions", {"model": "m", "prompt": tokens, "max_tokens": 4})
        assert headers["X-Inference-Cache-Reason"] == "PREFIX_MATCH"
        assert status == 200 and headers["X-Inference-Cache-Replica"] == "r2", headers
        assert json.loads(body)["backend"] == "r2"
        # The body reaches the backend unchanged.
        assert fleet["r2"].bodies[-1] == ("/v1/completions", {"model": "m", "prompt": tokens, "max_tokens": 4})
        # Streamed: the chunks are relayed as the backend sends them.
        status, headers, body = post(srv, "/v1/completions", {"model": "m", "prompt": tokens, "stream": True})
        assert status == 200 and headers["X-Inference-Cache-Replica"] == "r2"
        assert body.decode().count("data: ") == 3 and body.decode().endswith("data: [DONE]\n\n")
    finally:
        srv.shutdown()
        client.close()


def test_siblings_sent_through_four_gateways_at_once_meet_on_one_replica(cluster, fleet):
    # Eight requests share a new 4,000-token prefix (no engine holds it, no
    # event arrives) and go out at once through four gateways that share
    # their load and picks: the prefix's rendezvous and the pushed picks put
    # at least seven on one replica.
    shares, gws = [], []
    for i in range(4):
        client = Client(cluster.addrs, lookup_timeout=2.0)
        picker = Picker(PickerConfig(seed=100 + i))
        load = LoadShare(picker, client, picker_id=f"py-gw-{i}")
        picks = PickShare(client, load.picker_id, load_share=load)
        gw = gateway.Gateway(client, picker, {n: b.url for n, b in fleet.items()}, "m", "vllm", "t", 16, 30,
                             load.picker_id, picks)
        srv = gateway.serve(gw, "127.0.0.1:0")
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        shares.append((load, picks, client))
        gws.append(srv)
    try:
        prefix = list(range(40000, 44000))
        got, lock = [], threading.Lock()

        def send(i):
            _, headers, _ = post(gws[i % 4], "/v1/completions",
                                 {"model": "m", "prompt": prefix + list(range(50000 + 100 * i, 50000 + 100 * i + 64))})
            with lock:
                got.append(headers["X-Inference-Cache-Replica"])

        threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        top = max(got.count(r) for r in set(got))
        assert len(got) == 8 and top >= 7, got
        # The picks reached the cluster: another picker's lookup hints the
        # replica as a provisional residency, before any event.
        with Client(cluster.addrs, lookup_timeout=2.0) as c:
            r = c.lookup_tokens(pb.LookupRouteRequest(hash_scheme="vllm", model_id="m", tenant_id="t"), prefix, 16)
            assert any(h.provisional for h in r.replicas), r
        assert all(p.pushes >= 1 and p.failed == 0 for _, p, _ in shares)
    finally:
        for srv in gws:
            srv.shutdown()
        for load, picks, client in shares:
            picks.stop()
            load.stop()
            client.close()


def test_without_a_cluster_requests_are_routed_by_load(fleet):
    # Every cluster node down: lookups fail open to NO_HINT, and the picker
    # spreads the requests (each one held until it is done: equal cost, the
    # tie goes at random).
    srv, client = start_gateway([closed_port_addr(), closed_port_addr()], fleet, lookup_timeout=0.05)
    try:
        seen = set()
        for i in range(30):
            status, headers, _ = post(srv, "/v1/completions", {"model": "m", "prompt": list(range(i, i + 40))})
            assert status == 200 and headers["X-Inference-Cache-Reason"] == "NO_HINT"
            seen.add(headers["X-Inference-Cache-Replica"])
        assert seen == {"r0", "r1", "r2"}
        status, headers, _ = post(srv, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and headers["X-Inference-Cache-Reason"] == "NO_HINT"
        assert client.stats().fail_open >= 30
    finally:
        srv.shutdown()
        client.close()


def test_bad_requests_are_answered_with_the_reason(fleet):
    srv, client = start_gateway([closed_port_addr()], fleet, lookup_timeout=0.05)
    try:
        status, _, body = post(srv, "/v1/completions", ["not", "an", "object"])
        assert status == 400 and "not a JSON object" in json.loads(body)["error"]["message"]
        status, _, _ = post(srv, "/v1/embeddings", {})
        assert status == 404
    finally:
        srv.shutdown()
        client.close()


def test_backend_flags_name_the_bad_value():
    with pytest.raises(ValueError, match=r"--backend 'r0:http://x': must be REPLICA_ID=http://host:port"):
        gateway.parse_backends(["r0:http://x"])
    with pytest.raises(ValueError, match="given twice"):
        gateway.parse_backends(["r0=http://a", "r0=http://b"])
