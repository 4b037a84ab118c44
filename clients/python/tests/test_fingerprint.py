"""fingerprint() against the libxxhash golden vectors and the rules of contract §3."""

from __future__ import annotations

import random
import struct

import pytest
import xxhash

import inference_cache as fpmod
from inference_cache import FingerprintError, fingerprint


def test_fingerprint_matches_every_golden_vector(golden_vectors):
    for v in golden_vectors:
        fp = fingerprint(v["token_ids"], v["block_size"])
        assert [str(h) for h in fp.block_hashes] == v["block_hashes"], v["name"]
        assert fp.block_token_counts == v["block_token_counts"], v["name"]
        want_prefix = v["prefix_hash"]
        assert (None if fp.prefix_hash is None else str(fp.prefix_hash)) == want_prefix, v["name"]
        assert [f"{h:016x}" for h in fp.block_hashes] == v["block_hashes_hex"], v["name"]


def test_local_hashes_match_every_golden_vector(golden_vectors):
    for v in golden_vectors:
        bs, ids = v["block_size"], v["token_ids"]
        locals_ = [
            fpmod.local_hash(struct.pack(f"<{bs}I", *ids[i * bs : (i + 1) * bs])) for i in range(len(ids) // bs)
        ]
        assert [str(h) for h in locals_] == v["local_block_hashes"], v["name"]


def test_salted_chain_from_first_principles():
    # Contract §3.4, recomputed with xxhash and struct only: the salt's hash is
    # the root parent, so even h_0 is chained.
    tokens, bs, salt = list(range(100, 112)), 4, "tenant-a-salt"
    s = xxhash.xxh3_64_intdigest(salt.encode(), 1337)
    want, parent = [], s
    for i in range(3):
        local = xxhash.xxh3_64_intdigest(struct.pack("<4I", *tokens[i * 4 : i * 4 + 4]), 1337)
        parent = xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, local), 1337)
        want.append(parent)
    fp = fingerprint(tokens, bs, salt)
    assert fp.block_hashes == want
    assert fp.prefix_hash == want[-1]
    unsalted = fingerprint(tokens, bs)
    other = fingerprint(tokens, bs, "tenant-b-salt")
    for i in range(3):
        assert fp.block_hashes[i] not in (unsalted.block_hashes[i], other.block_hashes[i])


def test_empty_salt_is_the_unsalted_chain(golden_vectors):
    for v in golden_vectors:
        assert fingerprint(v["token_ids"], v["block_size"], "") == fingerprint(v["token_ids"], v["block_size"])
        assert fingerprint(v["token_ids"], v["block_size"], None) == fingerprint(v["token_ids"], v["block_size"])


def test_prefix_of_tokens_is_prefix_of_chain():
    r = random.Random(7)
    for _ in range(100):
        bs = r.randint(1, 64)
        toks = [r.getrandbits(32) for _ in range(r.randint(0, 20 * bs))]
        cut = r.randint(0, len(toks))
        whole, part = fingerprint(toks, bs), fingerprint(toks[:cut], bs)
        assert len(part.block_hashes) == cut // bs
        assert whole.block_hashes[: len(part.block_hashes)] == part.block_hashes


def test_accepts_any_sequence_of_ints():
    ids = list(range(32))
    want = fingerprint(ids, 16)
    assert fingerprint(tuple(ids), 16) == want
    assert fingerprint(range(32), 16) == want


@pytest.mark.parametrize(
    "ids,bs,msg",
    [
        ([1, -1], 2, "token id #1 -1: must be an integer between 0 and 4294967295"),
        ([2**32], 1, "token id #0 4294967296: must be an integer between 0 and 4294967295"),
        ([1.0], 1, "token id #0 1.0: must be an integer between 0 and 4294967295"),
        ([True], 1, "token id #0 True: must be an integer between 0 and 4294967295"),
        (["7"], 1, "token id #0 '7': must be an integer between 0 and 4294967295"),
        ([1], 0, "block_size 0: must be between 1 and 4096"),
        ([1], 4097, "block_size 4097: must be between 1 and 4096"),
        ([1], True, "block_size True: must be between 1 and 4096"),
    ],
)
def test_bad_input_names_the_value_and_the_limit(ids, bs, msg):
    with pytest.raises(FingerprintError) as exc:
        fingerprint(ids, bs)
    assert str(exc.value) == msg


def test_largest_block_size_is_accepted():
    fp = fingerprint([0] * 4096, 4096)
    assert len(fp.block_hashes) == 1 and fp.block_token_counts == [4096]
