"""``python3 -m inference_cache fingerprint --block-size N [--cache-salt S]``.

Reads a JSON array of token ids on standard input and prints the JSON object
``inference-cache fingerprint`` prints (contract §12.5): block_size,
block_hashes and prefix_hash as unsigned decimal strings (JSON numbers lose
precision above 2^53), block_token_counts; prefix_hash is null without a full
block. Bad input (a token id that is negative, not an integer, or over
2^32-1; a block size outside 1..4096; anything but a JSON array) exits 1 with
a message on standard error naming the bad value.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional, Sequence, TextIO

from ._fingerprint import MAX_BLOCK_SIZE, MAX_TOKEN_ID, FingerprintError, fingerprint


class _Literal(str):
    """A JSON number literal that is not an integer, kept as written."""


def _reject_constant(name: str) -> object:
    return _Literal(name)


def parse_token_json(text: str) -> List[int]:
    """The token ids of a JSON array; ValueError naming the bad item (0-based)."""
    try:
        raw = json.loads(text, parse_float=_Literal, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"stdin: expected a JSON array of token ids: {exc}") from None
    if not isinstance(raw, list):
        raise ValueError(f"stdin: expected a JSON array of token ids, got {type(raw).__name__}")
    ids: List[int] = []
    for i, v in enumerate(raw):
        if type(v) is not int or v < 0 or v > MAX_TOKEN_ID:
            shown = f'"{v}"' if isinstance(v, (_Literal, int)) else f"{json.dumps(v)} (a JSON {type(v).__name__})"
            raise ValueError(f"token id #{i} {shown}: must be an integer between 0 and {MAX_TOKEN_ID}")
        ids.append(v)
    return ids


def fingerprint_json(ids: Sequence[int], block_size: int, cache_salt: Optional[str]) -> str:
    """The output line of the command for ids (no trailing newline)."""
    fp = fingerprint(ids, block_size, cache_salt)
    out = {
        "block_size": fp.block_size,
        "block_hashes": [str(h) for h in fp.block_hashes],
        "block_token_counts": fp.block_token_counts,
        "prefix_hash": None if fp.prefix_hash is None else str(fp.prefix_hash),
    }
    return json.dumps(out, separators=(",", ":"))


def main(argv: Optional[Sequence[str]] = None, stdin: Optional[TextIO] = None, stdout: Optional[TextIO] = None,
         stderr: Optional[TextIO] = None) -> int:
    """Run the command; returns the exit status (0, or 1 for bad input, 2 for bad usage)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    ap = argparse.ArgumentParser(prog="python3 -m inference_cache")
    sub = ap.add_subparsers(dest="command", required=True)
    fp = sub.add_parser("fingerprint", help="print the content fingerprint of a JSON array of token ids on stdin",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    fp.add_argument("--block-size", type=int, default=16, help=f"tokens per block (1..{MAX_BLOCK_SIZE}; default 16)")
    fp.add_argument("--cache-salt", default="", help="vLLM cache_salt: fingerprint in its hash domain (default: none)")
    args = ap.parse_args(argv)
    if not 1 <= args.block_size <= MAX_BLOCK_SIZE:
        print(f"error: --block-size {args.block_size}: must be between 1 and {MAX_BLOCK_SIZE}", file=stderr)
        return 1
    try:
        ids = parse_token_json(stdin.read())
        line = fingerprint_json(ids, args.block_size, args.cache_salt)
    except (ValueError, FingerprintError) as exc:
        print(f"error: {exc}", file=stderr)
        return 1
    stdout.write(line + "\n")
    return 0
