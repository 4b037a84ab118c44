"""A cluster of real `inference-cache server` processes on loopback, for the
tests and the benchmark (the Python twin of internal/proccluster)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from typing import List, Optional

import grpc

from inference_cache.v1 import inferencecache_pb2 as pb
from inference_cache.v1 import inferencecache_pb2_grpc as pb_grpc

_given: set = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
        return lo if lo > 21000 else 32768
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port below the kernel's ephemeral range (where outgoing
    connections do not take it before the server binds it) that was free
    for TCP and UDP a moment ago and not handed out before (freeport.Port)."""
    hi = _ephemeral_low()
    for _ in range(100):
        p = random.randrange(20000, hi)
        if p in _given:
            continue
        _given.add(p)
        try:
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return p
    raise RuntimeError("no free loopback port below the ephemeral range after 100 tries")


class Proc:
    """One server process; start() again restarts it with the same command line."""

    def __init__(self, binary: str, node_id: str, args: List[str], log_path: str) -> None:
        self.binary, self.id, self.args, self.log_path = binary, node_id, args, log_path
        self.popen: Optional[subprocess.Popen] = None
        self.grpc_addr = args[args.index("--grpc-addr") + 1]

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen([self.binary] + self.args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        if self.running():
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
            self.popen.wait(10)

    def pause(self) -> None:
        self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.popen.send_signal(signal.SIGCONT)

    def stop(self, limit: float = 10.0) -> None:
        if not self.running():
            return
        self.popen.send_signal(signal.SIGCONT)
        self.popen.terminate()
        try:
            self.popen.wait(limit)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""


class Cluster:
    """n servers bootstrapping one cluster with --fast-timing, data and logs under base_dir."""

    def __init__(self, binary: str, base_dir: str, n: int = 3, extra: Optional[List[str]] = None) -> None:
        self.binary, self.base_dir, self.n, self.extra = binary, base_dir, n, list(extra or [])
        self.procs: List[Proc] = []

    @property
    def addrs(self) -> List[str]:
        return [p.grpc_addr for p in self.procs]

    def start(self, limit: float = 30.0) -> "Cluster":
        """Start the servers and wait for a leader and every node SERVING; a
        port lost before a server bound it restarts the whole cluster on fresh
        ports (three tries), as the Go e2e harness does."""
        for attempt in range(1, 4):
            self._spawn(attempt)
            try:
                self.wait_ready(limit)
                return self
            except RuntimeError as e:
                lost = any("address already in use" in p.log_tail(200) for p in self.procs)
                self.stop()
                if not lost or attempt == 3:
                    tails = "\n".join(f"--- {p.id}\n{p.log_tail()}" for p in self.procs)
                    raise RuntimeError(f"cluster did not start (try {attempt}): {e}\n{tails}") from None

    def _spawn(self, attempt: int) -> None:
        nodes = []
        for i in range(self.n):
            nid = f"n{i + 1}"
            nodes.append(dict(id=nid, data=os.path.join(self.base_dir, f"try{attempt}", nid),
                              grpc=f"127.0.0.1:{free_port()}", raft=f"127.0.0.1:{free_port()}",
                              gossip=f"127.0.0.1:{free_port()}", http=f"127.0.0.1:{free_port()}"))
        self.procs = []
        for nd in nodes:
            os.makedirs(os.path.dirname(nd["data"]), exist_ok=True)
            args = ["server", "--node-id", nd["id"], "--data-dir", nd["data"], "--grpc-addr", nd["grpc"],
                    "--raft-addr", nd["raft"], "--gossip-addr", nd["gossip"], "--http-addr", nd["http"],
                    "--bootstrap-expect", str(self.n), "--fast-timing", "--log-format", "json"]
            for o in nodes:
                if o is not nd:
                    args += ["--join", o["gossip"]]
            p = Proc(self.binary, nd["id"], args + self.extra, nd["data"] + ".log")
            p.start()
            self.procs.append(p)

    def wait_ready(self, limit: float) -> None:
        """Until every node names the same leader and answers its health check SERVING."""
        deadline = time.monotonic() + limit
        chans = [grpc.insecure_channel(a) for a in self.addrs]
        try:
            last = "no answer yet"
            while time.monotonic() < deadline:
                for p in self.procs:
                    if not p.running():
                        raise RuntimeError(f"{p.id} exited: {p.popen.returncode}")
                try:
                    leaders = set()
                    for ch in chans:
                        st = pb_grpc.ClusterStub(ch).Status(pb.StatusRequest(), timeout=1)
                        leaders.add(st.leader_id)
                        health = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda _: b"",
                                                response_deserializer=lambda b: b)(b"", timeout=1)
                        if health != b"\x08\x01":  # HealthCheckResponse{status: SERVING}
                            raise RuntimeError(f"health {health!r}")
                    if len(leaders) == 1 and "" not in leaders:
                        return
                    last = f"leaders {sorted(leaders)}"
                except (grpc.RpcError, RuntimeError) as e:
                    last = str(e)[:200]
                time.sleep(0.1)
            raise RuntimeError(f"not ready after {limit}s: {last}")
        finally:
            for ch in chans:
                ch.close()

    def stop(self) -> None:
        for p in self.procs:
            if p.running():
                p.popen.send_signal(signal.SIGCONT)
                p.popen.terminate()
        for p in self.procs:
            p.stop()
