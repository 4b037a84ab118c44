"""Python gateway SDK of inference-cache.

fingerprint() computes the server's content fingerprint (contract §3);
Client and AsyncClient call LookupRoute failing open and write with the Go
SDK's retries (contract §5.10, §8.5); Picker picks one replica per request
with the Go picker's cost model; LoadShare and AsyncLoadShare share its
in-flight load with the other pickers (contract §5.11); PickShare and
AsyncPickShare push its picks as provisional residencies (contract §5.12). Message classes: inference_cache.v1.
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
from .loadshare import AsyncLoadShare, LoadShare, default_picker_id, in_flight
from .picker import Decision, Inflight, PickCost, Picker, PickerConfig, rendezvous_key
from .pickshare import AsyncPickShare, PickShare, SharedInflight
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
    "AsyncLoadShare",
    "AsyncPickShare",
    "Client",
    "ClientConfig",
    "Decision",
    "Fingerprint",
    "FingerprintError",
    "Inflight",
    "LoadShare",
    "PickCost",
    "Picker",
    "PickerConfig",
    "PickShare",
    "SharedInflight",
    "Stats",
    "WriteError",
    "chain",
    "default_picker_id",
    "fill_fingerprint",
    "fingerprint",
    "in_flight",
    "local_hash",
    "new_request_id",
    "pb",
    "rendezvous_key",
    "retriable",
    "salt_root",
]
