"""Python gateway SDK of inference-cache.

fingerprint() computes the server's content fingerprint (contract §3);
Client and AsyncClient call LookupRoute failing open and write with the Go
SDK's retries (contract §5.10, §8.5); Picker picks one replica per request
with the Go picker's cost model. Message classes: inference_cache.v1.
"""

from ._core import (
    DEFAULT_FAIL_BACKOFF,
    DEFAULT_LOOKUP_TIMEOUT,
    DEFAULT_PROBE_TIMEOUT,
    DEFAULT_WRITE_ATTEMPT_TIMEOUT,
    DEFAULT_WRITE_PROBE_AFTER,
    DEFAULT_WRITE_RETRY,
    ClientConfig,
    Stats,
    WriteError,
    fill_fingerprint,
    new_request_id,
    retriable,
)
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
from .aio import AsyncClient
from .client import Client
from .picker import Decision, Inflight, PickCost, Picker, PickerConfig
from .v1 import inferencecache_pb2 as pb

__all__ = [
    "DEFAULT_FAIL_BACKOFF",
    "DEFAULT_LOOKUP_TIMEOUT",
    "DEFAULT_PROBE_TIMEOUT",
    "DEFAULT_WRITE_ATTEMPT_TIMEOUT",
    "DEFAULT_WRITE_PROBE_AFTER",
    "DEFAULT_WRITE_RETRY",
    "MAX_BLOCK_SIZE",
    "MAX_TOKEN_ID",
    "SEED",
    "AsyncClient",
    "Client",
    "ClientConfig",
    "Decision",
    "Fingerprint",
    "FingerprintError",
    "Inflight",
    "PickCost",
    "Picker",
    "PickerConfig",
    "Stats",
    "WriteError",
    "chain",
    "fill_fingerprint",
    "fingerprint",
    "local_hash",
    "new_request_id",
    "pb",
    "retriable",
    "salt_root",
]
