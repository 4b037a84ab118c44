"""The gateway's half of routing: pick one replica from a LookupRoute response
and the load this gateway sent (contract §5.10), the Go SDK's client.Picker
with the same cost model and defaults.

Cost model (units: prompt tokens)::

    cost(r) = queued(r) + others(r) + uncached(r) − cache_affinity × cached(r)

    cached(r)   = matched_tokens of r's PREFIX_MATCH hint, at most the prompt
                  (0 without one: TENANT_HOT and AFFINITY_HINT say nothing of
                  what r holds)
    uncached(r) = prompt tokens − cached(r)
    queued(r)   = uncached tokens of this picker's requests on r that have
                  not produced their first token (start … first_token)
    others(r)   = (max(0, waiting(r) − own_waiting(r))
                   + running_weight × max(0, running(r) − own_running(r)))
                  × tokens per request
                  waiting/running: the engine's counts on r's hint, else on
                  the response's loads (include_load), else 0;
                  own_waiting(r) = max(0, this picker's requests on r before
                  their first token − 1); own_running(r) = its requests in
                  flight there − own_waiting(r);
                  tokens per request = tokens_per_waiting_request, or when 0
                  the mean uncached tokens this picker sent (2048 before any)

The lowest cost wins. Ties go to fewer requests in flight (this picker's, or
the engine's running count when larger), then to the hint's reason (a
PREFIX_MATCH hint before AFFINITY_HINT before TENANT_HOT before no hint), then
among PREFIX_MATCH hints to the one the cluster ranked first, then at random.
With load_bound > 0 a candidate whose requests in flight + 1 exceed
ceil(load_bound × (all in flight + 1) / candidates) is passed over while
another is within the bound. The picker does no I/O and reads no clock; it is
safe to share between threads.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .v1 import inferencecache_pb2 as pb

__all__ = [
    "DEFAULT_CACHE_AFFINITY",
    "DEFAULT_RUNNING_WEIGHT",
    "DEFAULT_TOKENS_PER_WAITING_REQUEST",
    "PickerConfig",
    "PickCost",
    "Decision",
    "Inflight",
    "Picker",
]

#: Credit per cached token beyond the prefill it saves (Go DefaultCacheAffinity).
DEFAULT_CACHE_AFFINITY = 6.0
#: Share of a prefill counted per engine-reported running request (Go DefaultRunningWeight).
DEFAULT_RUNNING_WEIGHT = 0.3
#: Prefill tokens assumed per engine-reported request before the picker sent any.
DEFAULT_TOKENS_PER_WAITING_REQUEST = 2048.0


@dataclass
class PickerConfig:
    """Configuration of a Picker; the defaults are the tuned ones (Go DefaultPickerConfig).

    tokens_per_waiting_request: prefill tokens assumed per request an engine
        reports that this picker did not send; 0 = the mean uncached tokens of
        the requests this picker sent (2048 before the first).
    cache_affinity: cost −= cache_affinity × cached tokens (default 6).
    running_weight: share of a prefill per engine-reported running request
        not sent by this picker (default 0.3).
    load_bound: > 0 caps a candidate's share of requests in flight at
        load_bound × the mean (off by default).
    seed: seeds the choice among equal candidates; None = a random seed. The
        sequence differs from the Go picker's (PCG) for the same seed.
    """

    tokens_per_waiting_request: float = 0.0
    cache_affinity: float = DEFAULT_CACHE_AFFINITY
    running_weight: float = DEFAULT_RUNNING_WEIGHT
    load_bound: float = 0.0
    seed: Optional[int] = None


@dataclass
class PickCost:
    """One candidate's cost terms (prompt tokens, except the request counts).

    cost = queued_tokens + others_tokens + uncached_tokens − cache_affinity × cached_tokens.
    reason is the reason code (pb.ReasonCode int) of the hint naming the
    replica, NO_HINT when none does; reported_waiting/running the engine's
    counts from its hint or load; in_flight this picker's requests there.
    """

    replica: str
    reason: int = pb.NO_HINT
    cached_tokens: int = 0
    uncached_tokens: int = 0
    queued_tokens: float = 0.0
    others_tokens: float = 0.0
    in_flight: int = 0
    reported_waiting: int = 0
    reported_running: int = 0
    cost: float = 0.0

    def busy(self) -> int:
        """Requests in flight for ties: this picker's, or the engine's running count when larger."""
        return max(self.in_flight, self.reported_running)


@dataclass
class Decision:
    """A pick: replica ("" without candidates) at index (-1 then) and every candidate's terms."""

    replica: str = ""
    index: int = -1
    costs: List[PickCost] = field(default_factory=list)
    prompt_tokens: int = 0


_HINT_RANK = {pb.PREFIX_MATCH: 0, pb.AFFINITY_HINT: 1, pb.TENANT_HOT: 2}


def _hint_rank(reason: int) -> int:
    return _HINT_RANK.get(reason, 3)


def _cmp_pick(a: PickCost, ra: int, b: PickCost, rb: int) -> int:
    """-1 when a is the better candidate, 1 when b is, 0 for a tie."""
    if a.cost != b.cost:
        return -1 if a.cost < b.cost else 1
    if a.busy() != b.busy():
        return -1 if a.busy() < b.busy() else 1
    ha, hb = _hint_rank(a.reason), _hint_rank(b.reason)
    if ha != hb:
        return -1 if ha < hb else 1
    if a.reason == pb.PREFIX_MATCH and ra != rb:
        return -1 if ra < rb else 1
    return 0


class _Load:
    __slots__ = ("queued_tokens", "prefilling", "inflight")

    def __init__(self) -> None:
        self.queued_tokens = 0.0
        self.prefilling = 0
        self.inflight = 0


class Inflight:
    """One request the gateway sent. Call first_token() when its first token
    arrives and done() when it ends (done() alone for a request that failed
    before any token). Calls after the first of each kind do nothing."""

    def __init__(self, picker: Optional["Picker"], replica: str, uncached: float) -> None:
        self._p, self._replica, self._uncached = picker, replica, uncached
        self._first_seen = self._ended = picker is None

    def first_token(self) -> None:
        """The request's prefill no longer queues others."""
        p = self._p
        if p is None:
            return
        with p._mu:
            if self._first_seen:
                return
            self._first_seen = True
            load = p._replicas[self._replica]
            load.queued_tokens = max(0.0, load.queued_tokens - self._uncached)
            load.prefilling -= 1

    def done(self) -> None:
        """The request ended (its last token, or its failure)."""
        self.first_token()
        p = self._p
        if p is None:
            return
        with p._mu:
            if self._ended:
                return
            self._ended = True
            p._replicas[self._replica].inflight -= 1


class Picker:
    """Picks a replica per request by the cost model of this module's doc."""

    def __init__(self, config: Optional[PickerConfig] = None) -> None:
        self._cfg = config or PickerConfig()
        self._mu = threading.Lock()
        self._replicas: Dict[str, _Load] = {}
        self._sent_req = 0.0
        self._sent_tok = 0.0
        self._rng = random.Random(self._cfg.seed)

    def _tokens_per_request(self) -> float:
        if self._cfg.tokens_per_waiting_request > 0:
            return self._cfg.tokens_per_waiting_request
        if self._sent_req == 0:
            return DEFAULT_TOKENS_PER_WAITING_REQUEST
        return self._sent_tok / self._sent_req

    def _load(self, replica: str) -> _Load:
        load = self._replicas.get(replica)
        if load is None:
            load = self._replicas[replica] = _Load()
        return load

    def pick(self, resp: Optional[pb.LookupRouteResponse], candidates: Sequence[str], prompt_tokens: int) -> Decision:
        """Choose one of candidates (replica ids) for a request of prompt_tokens
        tokens given the cluster's response (None = NO_HINT). Hints naming
        replicas that are not candidates are ignored; no candidates gives an
        empty Decision (replica "", index -1)."""
        d = Decision(prompt_tokens=prompt_tokens, costs=[PickCost(replica=c) for c in candidates])
        if not candidates:
            return d
        rc = resp.reason_code if resp is not None else pb.NO_HINT
        hints = list(resp.replicas) if resp is not None else []
        loads = list(resp.loads) if resp is not None else []
        cfg = self._cfg
        with self._mu:
            per_req = self._tokens_per_request()
            ranks: List[int] = []
            total = 0
            for c in d.costs:
                rank = len(hints) + 1
                for k, h in enumerate(hints):
                    if h.replica_id != c.replica:
                        continue
                    c.reason, rank = rc, k
                    c.reported_waiting, c.reported_running = h.waiting_requests, h.running_requests
                    if rc == pb.PREFIX_MATCH:
                        c.cached_tokens = min(h.matched_tokens, prompt_tokens)
                    break
                if rank > len(hints):
                    for ld in loads:
                        if ld.replica_id == c.replica:
                            c.reported_waiting, c.reported_running = ld.waiting_requests, ld.running_requests
                            break
                ranks.append(rank)
                c.uncached_tokens = prompt_tokens - c.cached_tokens
                load = self._load(c.replica)
                c.queued_tokens, c.in_flight = load.queued_tokens, load.inflight
                total += c.in_flight
                own_waiting = max(0, load.prefilling - 1)
                c.others_tokens = (
                    max(0, c.reported_waiting - own_waiting)
                    + cfg.running_weight * max(0, c.reported_running - (c.in_flight - own_waiting))
                ) * per_req
                c.cost = c.queued_tokens + c.others_tokens + c.uncached_tokens - cfg.cache_affinity * c.cached_tokens
            bound = math.inf
            if cfg.load_bound > 0:
                bound = math.ceil(cfg.load_bound * (total + 1) / len(candidates))
            best = self._best(d.costs, ranks, bound)
            if best < 0:
                best = self._best(d.costs, ranks, math.inf)
        d.replica, d.index = candidates[best], best
        return d

    def _best(self, costs: List[PickCost], ranks: List[int], bound: float) -> int:
        ties: List[int] = []
        for i, c in enumerate(costs):
            if c.in_flight + 1 > bound:
                continue
            if not ties:
                ties.append(i)
                continue
            o = _cmp_pick(c, ranks[i], costs[ties[0]], ranks[ties[0]])
            if o < 0:
                ties = [i]
            elif o == 0:
                ties.append(i)
        if not ties:
            return -1
        if len(ties) == 1:
            return ties[0]
        return ties[self._rng.randrange(len(ties))]

    def start(self, d: Decision) -> Inflight:
        """Record that the gateway sent d's request to d.replica: its queued
        tokens grow by the chosen candidate's uncached_tokens until
        first_token(). An empty Decision gives an Inflight whose calls do nothing."""
        if d.index < 0 or d.index >= len(d.costs):
            return Inflight(None, "", 0.0)
        return self.start_on(d.replica, d.costs[d.index].uncached_tokens)

    def start_on(self, replica: str, uncached_tokens: int) -> Inflight:
        """Record a request sent to replica with uncached_tokens left to prefill
        (for a gateway that overrode the Decision)."""
        u = float(max(0, uncached_tokens))
        with self._mu:
            load = self._load(replica)
            load.queued_tokens += u
            load.prefilling += 1
            load.inflight += 1
            self._sent_req += 1
            self._sent_tok += u
        return Inflight(self, replica, u)
