"""Shared paths and fixtures of the Python client's tests."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
REPO_ROOT = PYTHON_DIR.parent.parent
sys.path.insert(0, str(PYTHON_DIR))

GOLDEN_PATH = REPO_ROOT / "fingerprint" / "testdata" / "fingerprint_vectors.json"
PICKER_CASES_PATH = REPO_ROOT / "client" / "testdata" / "picker_cases.json"


@pytest.fixture(scope="session")
def golden_vectors():
    """The vectors of fingerprint/testdata/fingerprint_vectors.json (made with libxxhash)."""
    with open(GOLDEN_PATH) as f:
        doc = json.load(f)
    assert doc["seed"] == 1337
    assert doc["vectors"], "the golden file holds no vectors"
    return doc["vectors"]


@pytest.fixture(scope="session")
def server_binary(tmp_path_factory):
    """The inference-cache binary: $IC_BINARY (make test-python builds bin/inference-cache
    and passes it), else bin/inference-cache, else built into a temporary directory."""
    path = os.environ.get("IC_BINARY") or str(REPO_ROOT / "bin" / "inference-cache")
    if os.path.exists(path):
        return path
    import subprocess

    out = tmp_path_factory.mktemp("bin") / "inference-cache"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/inference-cache"], cwd=REPO_ROOT, check=True)
    return str(out)


@pytest.fixture
def cluster_factory(server_binary, tmp_path):
    """Starts real 3-node clusters (stopped at the end of the test)."""
    from cluster import Cluster

    made = []

    def make(n=3, extra=None):
        c = Cluster(server_binary, str(tmp_path / f"cluster{len(made)}"), n=n, extra=extra).start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture(scope="module")
def cluster(server_binary, tmp_path_factory):
    """One real 3-node cluster for a test module."""
    from cluster import Cluster

    c = Cluster(server_binary, str(tmp_path_factory.mktemp("cluster"))).start()
    yield c
    c.stop()
