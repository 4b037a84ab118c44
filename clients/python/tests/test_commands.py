"""The three fingerprint commands print the same bytes for the same input:
`inference-cache fingerprint` (Go), `python3 -m inference_cache fingerprint`
and the Rust crate's `inference-cache-fingerprint`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, REPO_ROOT

RUST_DIR = REPO_ROOT / "clients" / "rust"


@pytest.fixture(scope="module")
def rust_binary():
    """The Rust command, built offline from Debian's cargo registry ($IC_RUST_FINGERPRINT names a built one)."""
    given = os.environ.get("IC_RUST_FINGERPRINT")
    if given:
        return given
    cargo = os.environ.get("CARGO") or shutil.which("cargo")
    if not cargo or not shutil.which(cargo):
        pytest.skip("no cargo: the Rust command is not compared (make deps-clients installs Debian's cargo)")
    subprocess.run([cargo, "build", "--offline", "--quiet", "--bin", "inference-cache-fingerprint"], cwd=RUST_DIR,
                   check=True)
    return str(RUST_DIR / "target" / "debug" / "inference-cache-fingerprint")


def commands(server_binary, rust_binary, block_size, salt=None):
    """The three command lines for block_size (and salt)."""
    salt_args = [] if salt is None else ["--cache-salt", salt]
    cmds = {
        "python": [sys.executable, "-m", "inference_cache", "fingerprint", "--block-size", str(block_size)] + salt_args,
        "rust": [rust_binary, "--block-size", str(block_size)] + salt_args,
        "go": [server_binary, "fingerprint", "--block-size", str(block_size)] + salt_args,
    }
    return cmds


def run_all(cmds, stdin):
    out = {}
    for name, argv in cmds.items():
        p = subprocess.run(argv, input=stdin.encode(), capture_output=True, cwd=PYTHON_DIR, timeout=60)
        out[name] = (p.returncode, p.stdout.decode(), p.stderr.decode())
    return out


def golden_inputs():
    with open(REPO_ROOT / "fingerprint" / "testdata" / "fingerprint_vectors.json") as f:
        return [(v["name"], json.dumps(v["token_ids"]), v["block_size"]) for v in json.load(f)["vectors"]]


EXTRA = [
    ("no_tokens", "[]", 1),
    ("extremes", "[4294967295, 0, 4294967295, 0]", 2),
    ("spaced", " [ 1 ,\n 2,3 ,4\t]\n", 2),
    ("largest_block", json.dumps(list(range(4096))), 4096),
]


@pytest.mark.parametrize("name,stdin,bs", golden_inputs() + EXTRA, ids=[x[0] for x in golden_inputs() + EXTRA])
def test_three_commands_print_identical_output(server_binary, rust_binary, name, stdin, bs):
    out = run_all(commands(server_binary, rust_binary, bs), stdin)
    assert out["go"][0] == 0, out["go"][2]
    for lang in ("python", "rust"):
        assert out[lang] == (0, out["go"][1], ""), lang


def test_golden_output_is_the_vector(server_binary, rust_binary):
    name, stdin, bs = golden_inputs()[4]  # three_blocks
    out = run_all(commands(server_binary, rust_binary, bs), stdin)
    with open(REPO_ROOT / "fingerprint" / "testdata" / "fingerprint_vectors.json") as f:
        v = json.load(f)["vectors"][4]
    got = json.loads(out["go"][1])
    assert got == {"block_size": bs, "block_hashes": v["block_hashes"], "block_token_counts": v["block_token_counts"],
                   "prefix_hash": v["prefix_hash"]}


@pytest.mark.parametrize("salt", ["tenant-a", "ünïcode salt", "s"])
def test_salted_three_commands_print_identical_output(server_binary, rust_binary, salt):
    stdin = json.dumps(list(range(100, 164)))
    out = run_all(commands(server_binary, rust_binary, 16, salt), stdin)
    assert out["python"][0] == 0 and out["python"] == out["rust"] == out["go"]
    unsalted = run_all(commands(server_binary, rust_binary, 16), stdin)
    assert json.loads(out["python"][1])["prefix_hash"] != json.loads(unsalted["go"][1])["prefix_hash"]
    # An empty salt is the unsalted chain.
    empty = run_all(commands(server_binary, rust_binary, 16, ""), stdin)
    assert empty["python"][1] == empty["rust"][1] == empty["go"][1] == unsalted["go"][1]


BAD = [
    ("negative", "[1, -1]", 2),
    ("fraction", "[1.5]", 2),
    ("exponent", "[1e2]", 2),
    ("over_u32", "[4294967296]", 2),
    ("string_id", '["7"]', 2),
    ("bool_id", "[true]", 2),
    ("object", "{}", 2),
    ("not_json", "1, 2", 2),
    ("block_size_0", "[1, 2]", 0),
    ("block_size_over_4096", "[1, 2]", 4097),
]


@pytest.mark.parametrize("name,stdin,bs", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_non_zero_with_a_message(server_binary, rust_binary, name, stdin, bs):
    out = run_all(commands(server_binary, rust_binary, bs), stdin)
    for lang, (rc, stdout, stderr) in out.items():
        assert rc != 0 and stdout == "" and stderr.strip(), f"{lang}: rc={rc} stdout={stdout!r} stderr={stderr!r}"
    if name in ("negative", "fraction", "over_u32"):
        # The same message in all three: it names the item and the limit.
        msgs = {lang: o[2].strip().splitlines()[0] for lang, o in out.items()}
        assert len(set(msgs.values())) == 1, msgs
