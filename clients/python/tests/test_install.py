"""The package installs with pip, offline, from Debian's packages alone
(pip, setuptools, venv; grpcio, protobuf and xxhash seen through
--system-site-packages), and the installed copy imports and runs
``python3 -m inference_cache fingerprint`` from outside the checkout."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR


def _run(cmd, **kw):
    # Without PYTHONPATH: a checkout on it would shadow the installed copy.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    """The interpreter of a fresh venv into which pip installed a copy of
    clients/python (copied so the build leaves nothing in the checkout)."""
    for mod in ("pip", "setuptools", "venv", "ensurepip"):
        if subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True).returncode != 0:
            pytest.skip(f"{sys.executable} lacks {mod} (make deps-clients installs python3-pip, python3-setuptools, python3-venv)")
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    shutil.copy(PYTHON_DIR / "pyproject.toml", src)
    shutil.copy(PYTHON_DIR / "README.md", src)
    shutil.copytree(PYTHON_DIR / "inference_cache", src / "inference_cache",
                    ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    py = venv / "bin" / "python"
    # --no-index: nothing may be downloaded.
    _run([str(py), "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", str(src)])
    return py, tmp


def test_installed_package_imports_from_its_prefix(venv_python):
    py, tmp = venv_python
    r = _run([str(py), "-c", "import inference_cache, inference_cache.v1; print(inference_cache.__file__)"], cwd=tmp)
    where = pathlib.Path(r.stdout.strip())
    assert (tmp / "venv") in where.parents, f"imported from {where}, not from the venv"
    r = _run([str(py), "-m", "pip", "show", "inference-cache"], cwd=tmp)
    assert "Name: inference-cache" in r.stdout


def test_installed_module_prints_fingerprints(venv_python, golden_vectors):
    py, tmp = venv_python
    v = next(v for v in golden_vectors if "cache_salt" not in v and len(v["token_ids"]) >= 2 * v["block_size"])
    r = _run([str(py), "-m", "inference_cache", "fingerprint", "--block-size", str(v["block_size"])],
             input=json.dumps(v["token_ids"]), cwd=tmp)
    out = json.loads(r.stdout)
    assert out["block_hashes"] == [str(h) for h in v["block_hashes"]]
