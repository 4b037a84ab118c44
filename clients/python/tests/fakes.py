"""In-process gRPC servers whose answers a test scripts, and a TCP listener
that accepts connections and never answers (a hung node)."""

from __future__ import annotations

import socket
import threading
from concurrent import futures
from typing import List, Optional

import grpc

from inference_cache.v1 import inferencecache_pb2 as pb
from inference_cache.v1 import inferencecache_pb2_grpc as pb_grpc


def retry_info_status(code: int, seconds: int, nanos: int) -> bytes:
    """A serialized google.rpc.Status{code, details: [Any(RetryInfo{retry_delay})]},
    assembled byte by byte from the protobuf encoding rules."""

    def varint(v: int) -> bytes:
        out = b""
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])

    def ld(field: int, body: bytes) -> bytes:
        return varint(field << 3 | 2) + varint(len(body)) + body

    duration = varint(1 << 3) + varint(seconds) + varint(2 << 3) + varint(nanos)
    retry_info = ld(1, duration)
    any_ = ld(1, b"type.googleapis.com/google.rpc.RetryInfo") + ld(2, retry_info)
    return varint(1 << 3) + varint(code) + ld(2, b"busy") + ld(3, any_)


class Scripted(pb_grpc.InferenceCacheServicer):
    """Answers each call with the next item of a script: a response message,
    or (grpc.StatusCode, details[, trailing metadata]) to fail; the last item
    repeats. Records every request and its metadata."""

    def __init__(self, ingest: Optional[List] = None, lookup: Optional[List] = None,
                 share: Optional[List] = None) -> None:
        self.scripts = {"Ingest": ingest or [pb.IngestResponse(accepted=1)],
                        "LookupRoute": lookup or [pb.LookupRouteResponse(reason_code=pb.PREFIX_MATCH)],
                        "SharePicks": share or [pb.SharePicksResponse()],
                        "ReportPickerLoad": [pb.ReportPickerLoadResponse()]}
        self.calls: List = []
        self.lock = threading.Lock()

    def _answer(self, name: str, request, context):
        with self.lock:
            self.calls.append((name, request, dict(context.invocation_metadata())))
            script = self.scripts[name]
            item = script.pop(0) if len(script) > 1 else script[0]
        if callable(item):
            item = item()
        if isinstance(item, tuple):
            if len(item) == 3:
                context.set_trailing_metadata(item[2])
            context.abort(item[0], item[1])
        return item

    def Ingest(self, request, context):
        return self._answer("Ingest", request, context)

    def LookupRoute(self, request, context):
        return self._answer("LookupRoute", request, context)

    def SharePicks(self, request, context):
        return self._answer("SharePicks", request, context)

    def ReportPickerLoad(self, request, context):
        return self._answer("ReportPickerLoad", request, context)

    def ReportReplicaStats(self, request, context):
        with self.lock:
            self.calls.append(("ReportReplicaStats", request, dict(context.invocation_metadata())))
        return pb.ReportReplicaStatsResponse(accepted=len(request.stats))


class FakeServer:
    """A real gRPC server on a loopback port running a Scripted servicer."""

    def __init__(self, servicer: Scripted) -> None:
        self.servicer = servicer
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_InferenceCacheServicer_to_server(servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(None)

    def calls(self, name: str):
        with self.servicer.lock:
            return [c for c in self.servicer.calls if c[0] == name]


class SilentListener:
    """Accepts TCP connections on a loopback port and never writes a byte:
    a node whose process is hung (gRPC's handshake never completes)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns: List[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def stop(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self.conns:
            c.close()


def closed_port_addr() -> str:
    """A loopback address where nothing listens (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return addr

