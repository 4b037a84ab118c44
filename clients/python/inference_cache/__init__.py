"""Python gateway SDK of inference-cache: fingerprint, clients and the picker."""

from ._fingerprint import (
    MAX_BLOCK_SIZE,
    MAX_TOKEN_ID,
    SEED,
    Fingerprint,
    FingerprintError,
    chain,
    fingerprint,
    local_hash,
    salt_root,
)

__all__ = [
    "MAX_BLOCK_SIZE",
    "MAX_TOKEN_ID",
    "SEED",
    "Fingerprint",
    "FingerprintError",
    "chain",
    "fingerprint",
    "local_hash",
    "salt_root",
]
