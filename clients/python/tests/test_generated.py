"""The committed message and service code is what protoc makes of the .proto."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import PYTHON_DIR, REPO_ROOT

GENERATED = ["inferencecache_pb2.py", "inferencecache_pb2_grpc.py"]


def test_committed_code_is_generated_from_the_proto(tmp_path):
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        pytest.skip("protoc or grpc_python_plugin missing (make deps-clients installs protobuf-compiler-grpc)")
    subprocess.run(
        [protoc, "-I", f"inference_cache/v1={REPO_ROOT / 'api/inferencecache/v1'}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", f"--plugin=protoc-gen-grpc_python={plugin}",
         "inference_cache/v1/inferencecache.proto"],
        check=True,
    )
    for name in GENERATED:
        got = (PYTHON_DIR / "inference_cache" / "v1" / name).read_text()
        want = (tmp_path / "inference_cache" / "v1" / name).read_text()
        assert got == want, f"{name} is out of date: run `make proto-python`"


def test_generated_messages_load_and_round_trip():
    from inference_cache.v1 import inferencecache_pb2 as pb

    req = pb.LookupRouteRequest(block_hashes=[2**64 - 1], block_token_counts=[16], cache_salt="s")
    assert pb.LookupRouteRequest.FromString(req.SerializeToString()) == req
    assert pb.ReasonCode.Name(pb.PREFIX_MATCH) == "PREFIX_MATCH"
