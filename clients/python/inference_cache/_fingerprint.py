"""The content fingerprint of token ids, bit for bit the server's (contract §3).

local_i  = XXH3-64(LE32(t[i*B]) ‖ … ‖ LE32(t[(i+1)*B-1]), seed 1337)
h_0      = local_0                      (unsalted, §3.2)
h_0      = XXH3-64(LE64(s) ‖ LE64(local_0), 1337), s = XXH3-64(salt, 1337)  (salted, §3.4)
h_i      = XXH3-64(LE64(h_{i-1}) ‖ LE64(local_i), 1337)   for i ≥ 1
block_hashes = [h_0 … h_{k-1}], k = n // B (the partial tail is dropped),
prefix_hash  = h_{k-1}, or None when k = 0.
"""

from __future__ import annotations

import array
import struct
import sys
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence

import xxhash

__all__ = [
    "SEED",
    "MAX_BLOCK_SIZE",
    "MAX_TOKEN_ID",
    "Fingerprint",
    "FingerprintError",
    "fingerprint",
    "local_hash",
    "chain",
    "salt_root",
]

#: The XXH3 seed of every hash in the scheme (contract §3.2; Go fingerprint.Seed).
SEED = 1337
#: The largest block size in tokens (contract §3.1; Go fingerprint.MaxBlockSize).
MAX_BLOCK_SIZE = 4096
#: The largest token id: ids are hashed as unsigned 32-bit integers.
MAX_TOKEN_ID = 2**32 - 1

_LE64X2 = struct.Struct("<QQ")
# The array typecode of a 4-byte unsigned int ("I" on every common platform).
_U32 = next(c for c in "IL" if array.array(c).itemsize == 4)


class FingerprintError(ValueError):
    """Bad input to fingerprint(): the message names the argument and its limit."""


@dataclass(frozen=True)
class Fingerprint:
    """The key of a token sequence (contract §3.3).

    block_hashes: the chained hashes h_0 … h_{k-1}, unsigned 64-bit ints.
    block_token_counts: block_size for every block (len == len(block_hashes)).
    prefix_hash: h_{k-1}, or None when there is no full block (no key: the
    server answers NO_HINT for it).
    """

    block_size: int
    block_hashes: List[int] = field(default_factory=list)
    block_token_counts: List[int] = field(default_factory=list)
    prefix_hash: Optional[int] = None


def local_hash(block: bytes) -> int:
    """XXH3-64 with seed 1337 of one block's LE32 token bytes (contract §3.2)."""
    return xxhash.xxh3_64_intdigest(block, SEED)


def chain(parent: int, local: int) -> int:
    """XXH3-64 with seed 1337 of LE64(parent) ‖ LE64(local): the hash of the
    prefix ending in the block whose local hash is local (contract §3.2)."""
    return xxhash.xxh3_64_intdigest(_LE64X2.pack(parent, local), SEED)


def salt_root(salt: Optional[str]) -> Optional[int]:
    """The chain root of a cache salt, XXH3-64(UTF-8 bytes of salt, 1337), or
    None for no salt ("" or None: the unsalted chain of contract §3.2)."""
    if not salt:
        return None
    return xxhash.xxh3_64_intdigest(salt.encode("utf-8"), SEED)


def _le32_bytes(token_ids: Sequence[int]) -> bytes:
    """token_ids as concatenated little-endian uint32s; FingerprintError names
    the first id that is not an integer in [0, 2^32-1]."""
    try:
        arr = array.array(_U32, token_ids)
    except (OverflowError, TypeError) as exc:
        _raise_bad_id(token_ids, exc)
    # array accepts True and False as 1 and 0; JSON and the server do not.
    if bool in map(type, token_ids):
        _raise_bad_id(token_ids, None)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def _raise_bad_id(token_ids: Iterable[object], cause: Optional[BaseException]) -> None:
    for i, t in enumerate(token_ids):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0 or t > MAX_TOKEN_ID:
            raise FingerprintError(
                f"token id #{i} {t!r}: must be an integer between 0 and {MAX_TOKEN_ID}"
            ) from cause
    raise FingerprintError(f"token ids: {cause}") from cause


def fingerprint(token_ids: Sequence[int], block_size: int, cache_salt: Optional[str] = None) -> Fingerprint:
    """The key of token_ids with block_size tokens per block (contract §3).

    token_ids: ints in [0, 2^32-1]. block_size: 1 … 4096. cache_salt: vLLM's
    per-request cache_salt; None or "" is the unsalted chain (§3.4).
    Raises FingerprintError naming the bad argument and its limit.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise FingerprintError(f"block_size {block_size!r}: must be between 1 and {MAX_BLOCK_SIZE}")
    if cache_salt is not None and not isinstance(cache_salt, str):
        raise FingerprintError(f"cache_salt {cache_salt!r}: must be a string")
    data = _le32_bytes(token_ids)
    k = len(token_ids) // block_size
    step = 4 * block_size
    view = memoryview(data)
    digest = xxhash.xxh3_64_intdigest
    pack = _LE64X2.pack
    hashes: List[int] = []
    parent = salt_root(cache_salt)
    for i in range(k):
        local = digest(view[i * step : (i + 1) * step], SEED)
        h = local if parent is None else digest(pack(parent, local), SEED)
        hashes.append(h)
        parent = h
    return Fingerprint(
        block_size=block_size,
        block_hashes=hashes,
        block_token_counts=[block_size] * k,
        prefix_hash=hashes[-1] if hashes else None,
    )
