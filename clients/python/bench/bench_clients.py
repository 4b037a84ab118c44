#!/usr/bin/env python3
"""The client benchmark of BENCHMARKS.md: Python fingerprint throughput and
lookup latency through the Python client, beside the Go SDK's (the
clients/benchgo command), in one run against one real 3-node cluster.

    make bench-clients        # = python3 clients/python/bench/bench_clients.py --runs 5

Each run times, in turn: Python fingerprint (tokens/s), Go fingerprint,
sequential Client.lookup_tokens calls (local fingerprint + one LookupRoute
answered PREFIX_MATCH), the same through the Go client.Client, and
AsyncClient with 1 and 64 lookups in flight. The table gives the median of
the runs. Python 3.11 from Debian, one thread, on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO_ROOT = os.path.dirname(os.path.dirname(PYTHON_DIR))
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, os.path.join(PYTHON_DIR, "tests"))

from cluster import Cluster  # noqa: E402
from inference_cache import AsyncClient, Client, fingerprint  # noqa: E402
from inference_cache.v1 import inferencecache_pb2 as pb  # noqa: E402

SCHEME, MODEL, TENANT = "vllm", "m", "t"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def py_fingerprint_rate(prompt, bs, seconds):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fingerprint(prompt, bs)
        n += 20
    return n * len(prompt) / (time.perf_counter() - t0)


def req():
    return pb.LookupRouteRequest(hash_scheme=SCHEME, model_id=MODEL, tenant_id=TENANT)


def py_lookups(addrs, prompt, bs, count):
    with Client(addrs, lookup_timeout=1.0) as c:
        for _ in range(50):
            c.lookup_tokens(req(), prompt, bs)
        lat = []
        for _ in range(count):
            t0 = time.perf_counter()
            r = c.lookup_tokens(req(), prompt, bs)
            lat.append(time.perf_counter() - t0)
            assert r.reason_code == pb.PREFIX_MATCH, r
        return lat, c.stats().fail_open


def py_async_lookups(addrs, prompt, bs, count, concurrency):
    async def go():
        async with AsyncClient(addrs, lookup_timeout=1.0) as c:
            for _ in range(50):
                await c.lookup_tokens(req(), prompt, bs)
            lat = []

            async def worker(k):
                for _ in range(k):
                    t0 = time.perf_counter()
                    r = await c.lookup_tokens(req(), prompt, bs)
                    lat.append(time.perf_counter() - t0)
                    assert r.reason_code == pb.PREFIX_MATCH, r

            t0 = time.perf_counter()
            await asyncio.gather(*[worker(count // concurrency) for _ in range(concurrency)])
            return lat, len(lat) / (time.perf_counter() - t0)

    return asyncio.run(go())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--binary", default=os.path.join(REPO_ROOT, "bin", "inference-cache"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-clients-")
    benchgo = os.path.join(tmp, "benchgo")
    subprocess.run(["go", "build", "-o", benchgo, "./clients/benchgo"], cwd=REPO_ROOT, check=True)
    prompt = list(range(args.tokens))
    cl = Cluster(args.binary, tmp).start()
    try:
        with Client(cl.addrs) as c:
            c.ingest(pb.IngestRequest(events=[
                pb.BlockEvent(kind=pb.BlockEvent.STORED, replica_id=rid, hash_scheme=SCHEME, model_id=MODEL,
                              tenant_id=TENANT, token_ids=toks, block_size=args.block_size)
                for rid, toks in (("r-hot", prompt), ("r-other", list(range(10**6, 10**6 + 64))))]))
            deadline = time.monotonic() + 10
            while not all(c.lookup_tokens(req(), prompt, args.block_size).reason_code == pb.PREFIX_MATCH
                          for _ in range(3)):
                if time.monotonic() > deadline:
                    raise SystemExit("the cluster never answered PREFIX_MATCH")
                time.sleep(0.05)
        rows = {k: [] for k in ("py_fp", "go_fp", "py_p50", "py_p99", "go_p50", "go_p99", "aio1_p50", "aio1_p99",
                                "aio64_p50", "aio64_p99", "aio64_rate")}
        for run in range(args.runs):
            rows["py_fp"].append(py_fingerprint_rate(prompt, args.block_size, 1.0))
            lat, fo = py_lookups(cl.addrs, prompt, args.block_size, args.lookups)
            rows["py_p50"].append(pct(lat, 0.5) * 1e6)
            rows["py_p99"].append(pct(lat, 0.99) * 1e6)
            out = subprocess.run([benchgo, "--addrs", ",".join(cl.addrs), "--lookups", str(args.lookups),
                                  "--tokens", str(args.tokens), "--block-size", str(args.block_size)],
                                 check=True, capture_output=True, text=True)
            g = json.loads(out.stdout)
            assert g["fail_open"] == 0, g
            rows["go_fp"].append(g["fingerprint_tokens_per_s"])
            rows["go_p50"].append(g["lookup_p50_us"])
            rows["go_p99"].append(g["lookup_p99_us"])
            lat, _ = py_async_lookups(cl.addrs, prompt, args.block_size, args.lookups, 1)
            rows["aio1_p50"].append(pct(lat, 0.5) * 1e6)
            rows["aio1_p99"].append(pct(lat, 0.99) * 1e6)
            lat, rate = py_async_lookups(cl.addrs, prompt, args.block_size, args.lookups, 64)
            rows["aio64_p50"].append(pct(lat, 0.5) * 1e6)
            rows["aio64_p99"].append(pct(lat, 0.99) * 1e6)
            rows["aio64_rate"].append(rate)
            print(f"run {run + 1}/{args.runs}: " + ", ".join(f"{k} {v[-1]:.4g}" for k, v in rows.items()),
                  file=sys.stderr, flush=True)
    finally:
        cl.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    m = {k: statistics.median(v) for k, v in rows.items()}
    print(f"Prompt {args.tokens} tokens, block size {args.block_size}; {args.lookups} lookups per run, "
          f"median of {args.runs} runs.\n")
    print("| | fingerprint (tokens/s) | lookup p50 | lookup p99 |")
    print("|---|---|---|---|")
    print(f"| Go SDK (`client.Client`, sequential) | {m['go_fp'] / 1e6:.0f} M | {m['go_p50']:.0f} µs | {m['go_p99']:.0f} µs |")
    print(f"| Python `Client` (sequential) | {m['py_fp'] / 1e6:.1f} M | {m['py_p50']:.0f} µs | {m['py_p99']:.0f} µs |")
    print(f"| Python `AsyncClient`, 1 in flight | — | {m['aio1_p50']:.0f} µs | {m['aio1_p99']:.0f} µs |")
    print(f"| Python `AsyncClient`, 64 in flight ({m['aio64_rate']:.0f} lookups/s) | — | "
          f"{m['aio64_p50']:.0f} µs | {m['aio64_p99']:.0f} µs |")


if __name__ == "__main__":
    main()
