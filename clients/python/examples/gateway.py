#!/usr/bin/env python3
"""A small OpenAI-compatible gateway routing by inference-cache hints.

    python3 examples/gateway.py --cluster 127.0.0.1:7401,127.0.0.1:7411,127.0.0.1:7421 \\
        --backend sim-1=http://127.0.0.1:7431 --backend sim-2=http://127.0.0.1:7441 \\
        --backend sim-3=http://127.0.0.1:7451 --model qwen3 --listen 127.0.0.1:8000

(make run's cluster and sim engines).

For every POST /v1/completions it asks the cluster which backends hold the
prompt's prefix (Client.lookup_tokens or lookup_route, failing open to
NO_HINT within --lookup-timeout), picks one with the Picker (cached prefix
against the queue this gateway sent, contract §5.10), forwards the request
unchanged and relays the answer, streamed or not, with the headers
X-Inference-Cache-Replica and X-Inference-Cache-Reason. With several
gateways, each reports its in-flight load (LoadShare, --share-load, on by
default) and its lookups carry its picker id, so every picker counts the
others' requests; and it pushes each token-id prompt's pick to the cluster
as it is made (PickShare, --share-picks, on by default), so that the other
gateways' lookups hint that replica before its engine's KV events arrive
(contract §5.12), and picks a new prefix's replica by its rendezvous key, so
that siblings sent through different gateways at once meet on one replica;
its lookups take turns (contract §5.13), so that the gateways' decisions of
one instant each see the picks before them, the pick's push settling them.
A request whose backend cannot be reached has its pick withdrawn. The
replica ids of
--backend must be the ids the engines' KV events are indexed under.

Prompts:
- token ids (``"prompt": [1, 2, …]``): fingerprinted here with --block-size
  (it must equal the engines' block size and the policy's blockSize);
- text (``"prompt": "…"``): sent as prompt_text, which the server tokenizes
  with the model's tokenizer (its --models-dir; without one the answer is
  NO_HINT and the request is routed by load); keyed on the server, so the
  gateway has no block hashes to push its pick with. The picker's prompt length for
  text is estimated as ceil(UTF-8 bytes / 4): a stand-in for the tokenizer
  that only weighs the prompt against queued work, never forms the key;
- a list of prompts (a batch) or anything else: routed by load alone.

POST /v1/chat/completions is routed by load alone (the gateway renders no
chat template, so it has no key). GET /health answers 200. Standard library
HTTP only (http.server, urllib); one thread per connection.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from inference_cache import Client, LoadShare, Picker, PickerConfig, PickShare, rendezvous_key  # noqa: E402
from inference_cache.v1 import inferencecache_pb2 as pb  # noqa: E402

#: The bytes per token the picker assumes for a text prompt (see the module doc).
TEXT_BYTES_PER_TOKEN = 4
#: The largest request body accepted (bytes).
MAX_BODY_BYTES = 16 << 20


class Gateway:
    """Routing state: the cluster client, the picker and the backends (replica id → base URL)."""

    def __init__(self, client: Client, picker: Picker, backends: Dict[str, str], model: str, hash_scheme: str,
                 tenant: str, block_size: int, backend_timeout: float, picker_id: str = "",
                 pick_share: Optional[PickShare] = None) -> None:
        self.client, self.picker, self.backends = client, picker, backends
        self.model, self.hash_scheme, self.tenant, self.block_size = model, hash_scheme, tenant, block_size
        self.backend_timeout = backend_timeout
        self.picker_id = picker_id  # lookups leave this gateway's own shared load out
        self.pick_share = pick_share  # pushes each token-id prompt's pick (contract §5.12)
        self.candidates = list(backends)

    def route(self, path: str, body: dict) -> Tuple[pb.LookupRouteResponse, int]:
        """The cluster's answer for a request and the prompt length the picker weighs it by."""
        resp, n, _ = self.lookup(path, body)
        return resp, n

    def lookup(self, path: str, body: dict) -> Tuple[pb.LookupRouteResponse, int, Optional[pb.LookupRouteRequest]]:
        """route's answer and prompt length, and the lookup request when it
        carries the prompt's block hashes (a token-id prompt, fingerprinted
        here): its rendezvous key and its pick come from them."""
        if path != "/v1/completions":
            return pb.LookupRouteResponse(reason_code=pb.NO_HINT, detail="gateway: no key for this endpoint"), 0, None
        req = pb.LookupRouteRequest(hash_scheme=self.hash_scheme, model_id=body.get("model") or self.model,
                                    tenant_id=self.tenant, cache_salt=str(body.get("cache_salt") or ""),
                                    include_load=True, picker_id=self.picker_id)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            # Its pick is pushed, and the push settles the lookup's turn among
            # the gateways' decisions of one instant (contract §5.13).
            req.take_turn = self.pick_share is not None and bool(self.picker_id)
            resp = self.client.lookup_tokens(req, prompt, self.block_size)
            return resp, len(prompt), (req if req.block_hashes else None)
        if isinstance(prompt, str):
            req.prompt_text = prompt
            n = math.ceil(len(prompt.encode("utf-8")) / TEXT_BYTES_PER_TOKEN)
            return self.client.lookup_route(req), n, None
        return (pb.LookupRouteResponse(reason_code=pb.NO_HINT, detail="gateway: prompt is not one text or token list"),
                0, None)

    def pick(self, path: str, body: dict):
        """Look the request up, pick its replica and record the pick: the
        answer, the Decision and the flight (first_token, done, fail)."""
        resp, prompt_tokens, req = self.lookup(path, body)
        if self.pick_share is not None and req is not None:
            resp = self.pick_share.merge(resp, req)  # its own picks at once, before the node has them
        key = rendezvous_key(req.block_hashes, self.block_size) if req is not None else 0
        decision = self.picker.pick(resp, self.candidates, prompt_tokens, key)
        if self.pick_share is not None and req is not None:
            return resp, decision, self.pick_share.start(self.picker, decision, req, turn=resp.turn)
        return resp, decision, self.picker.start(decision)


class Handler(BaseHTTPRequestHandler):
    """Forwards OpenAI requests to the backend the picker chose."""

    gateway: Gateway  # set on the subclass made by serve()
    protocol_version = "HTTP/1.0"  # a streamed answer ends when the connection closes

    def log_message(self, fmt: str, *args) -> None:  # quiet by default; --verbose restores it
        if getattr(self.server, "verbose", False):
            super().log_message(fmt, *args)

    def _error(self, status: int, msg: str) -> None:
        data = json.dumps({"error": {"message": msg, "type": "gateway_error", "code": status}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._error(404, f"{self.path}: not found (POST /v1/completions or /v1/chat/completions; GET /health)")

    def do_POST(self) -> None:
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._error(404, f"{self.path}: not found (POST /v1/completions or /v1/chat/completions)")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._error(400, "Content-Length: not a number")
            return
        if length <= 0 or length > MAX_BODY_BYTES:
            self._error(400 if length <= 0 else 413, f"request body: {length} bytes; must be 1 to {MAX_BODY_BYTES}")
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            self._error(400, f"request body: {e}")
            return
        g = self.gateway
        resp, decision, flight = g.pick(self.path, body)
        try:
            if not self._forward(g.backends[decision.replica], decision.replica, resp, raw, flight):
                fail = getattr(flight, "fail", None)
                if fail is not None:
                    fail()  # the request never reached the replica: its pick is withdrawn
        finally:
            flight.done()

    def _forward(self, base: str, replica: str, resp: pb.LookupRouteResponse, raw: bytes, flight) -> bool:
        """Relay the request to the backend and its answer back; False when
        the backend could not be reached (answered 502 here)."""
        g = self.gateway
        out = urllib.request.Request(base.rstrip("/") + self.path, data=raw, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            up = urllib.request.urlopen(out, timeout=g.backend_timeout)
        except urllib.error.HTTPError as e:
            up = e  # the backend's own error answer is relayed as it is
        except (urllib.error.URLError, OSError) as e:
            self._error(502, f"backend {replica} ({base}): {getattr(e, 'reason', e)}")
            return False
        with up:
            self.send_response(up.status if hasattr(up, "status") else up.code)
            for k in ("Content-Type", "Content-Length"):
                if up.headers.get(k):
                    self.send_header(k, up.headers[k])
            self.send_header("X-Inference-Cache-Replica", replica)
            self.send_header("X-Inference-Cache-Reason", pb.ReasonCode.Name(resp.reason_code))
            self.end_headers()
            while True:
                chunk = up.read1(65536) if hasattr(up, "read1") else up.read(65536)
                if not chunk:
                    break
                flight.first_token()  # the first bytes of the answer: its prefill is done
                self.wfile.write(chunk)
                self.wfile.flush()
        return True


def serve(gateway: Gateway, listen: str, verbose: bool = False) -> ThreadingHTTPServer:
    """An HTTP server for gateway on listen (host:port; port 0 picks one), not yet serving."""
    host, _, port = listen.rpartition(":")
    handler = type("GatewayHandler", (Handler,), {"gateway": gateway})
    srv = ThreadingHTTPServer((host or "127.0.0.1", int(port)), handler)
    srv.daemon_threads = True
    srv.verbose = verbose
    return srv


def parse_backends(specs: List[str]) -> Dict[str, str]:
    """--backend ID=URL values as a dict; ValueError naming the bad one."""
    out: Dict[str, str] = {}
    for s in specs:
        rid, sep, url = s.partition("=")
        if not sep or not rid or not url.startswith(("http://", "https://")):
            raise ValueError(f"--backend {s!r}: must be REPLICA_ID=http://host:port")
        if rid in out:
            raise ValueError(f"--backend {s!r}: replica id {rid!r} given twice")
        out[rid] = url
    if not out:
        raise ValueError("--backend: at least one is required")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:8000", help="host:port to serve on (default 127.0.0.1:8000)")
    ap.add_argument("--cluster", required=True, help="inference-cache gRPC addresses, comma-separated")
    ap.add_argument("--backend", action="append", default=[], help="REPLICA_ID=http://host:port (repeatable)")
    ap.add_argument("--model", default="", help="model_id when the request names none")
    ap.add_argument("--hash-scheme", default="vllm", help="hash_scheme of the engines' events (default vllm)")
    ap.add_argument("--tenant", default="", help="tenant_id of every lookup (default none)")
    ap.add_argument("--block-size", type=int, default=16, help="tokens per block for token-id prompts (default 16)")
    ap.add_argument("--lookup-timeout", type=float, default=0.05, help="lookup budget, seconds (default 0.05)")
    ap.add_argument("--backend-timeout", type=float, default=600, help="backend answer timeout, seconds (default 600)")
    ap.add_argument("--share-load", action=argparse.BooleanOptionalAction, default=True,
                    help="report this gateway's in-flight load to the cluster every 50 ms, so that the other "
                         "gateways' pickers count it (contract §5.11; default on)")
    ap.add_argument("--share-picks", action=argparse.BooleanOptionalAction, default=True,
                    help="push each token-id prompt's pick to the cluster as it is made, so that the other "
                         "gateways' lookups hint its replica before the engine's events arrive (contract §5.12; "
                         "needs --share-load's picker id; default on)")
    ap.add_argument("--picker-id", default="", help="this gateway's picker id (default hostname-pid-random)")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    args = ap.parse_args(argv)
    try:
        backends = parse_backends(args.backend)
        if not 1 <= args.block_size <= 4096:
            raise ValueError(f"--block-size {args.block_size}: must be between 1 and 4096")
        client = Client(args.cluster, lookup_timeout=args.lookup_timeout)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    picker = Picker(PickerConfig())
    try:
        share = LoadShare(picker, client, picker_id=args.picker_id or None) if args.share_load else None
    except ValueError as e:
        print(f"error: --picker-id: {str(e).split(': ', 1)[-1]}", file=sys.stderr)
        client.close()
        return 1
    picks = PickShare(client, share.picker_id, load_share=share) if share and args.share_picks else None
    gw = Gateway(client, picker, backends, args.model, args.hash_scheme, args.tenant,
                 args.block_size, args.backend_timeout, share.picker_id if share else "", picks)
    srv = serve(gw, args.listen, args.verbose)
    print(f"gateway on http://{srv.server_address[0]}:{srv.server_address[1]} → {', '.join(backends)}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        if picks:
            picks.stop()
        if share:
            share.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
