"""The gateway's half of routing: pick one replica from a LookupRoute response
and the load this gateway sent (contract §5.10), the Go SDK's client.Picker
with the same cost model and defaults.

Cost model (units: prompt tokens)::

    cost(r) = queued(r) + others(r) − repeated(r) + uncached(r) − credit(r)
              + decode(r) + kv(r)

    credit(r)   = cache_affinity × cached(r) × (1 + cached(r) / cache_affinity_tokens)
                  (cache_affinity × cached(r) when cache_affinity_tokens is 0)
                  + cache_affinity_load × L × (1 + L) × cached(r)
    L           = mean over the candidates of prefill(c)
    prefill(c)  = max(own_prefilling(c) + others_prefilling_requests(c),
                  waiting(c)): the requests queued for or in prefill on c

    cached(r)   = matched_tokens of r's PREFIX_MATCH hint, at most the prompt
                  (0 without one: TENANT_HOT and AFFINITY_HINT say nothing of
                  what r holds)
    uncached(r) = prompt tokens − cached(r)
    queued(r)   = uncached tokens of this picker's requests on r that have
                  not produced their first token (start … first_token)
    others(r)   = others_prefill_tokens(r)
                  + (max(0, waiting(r) − known_waiting(r))
                  + running_weight × max(0, running(r) − known_running(r)))
                  × tokens per request
                  waiting/running: the engine's counts on r's hint, else on
                  the response's loads (include_load), else 0;
                  others_*: the loads' ReplicaLoad.others_* (what the other
                  pickers sharing the cluster reported in flight on r);
                  known_waiting(r) = max(0, own_prefilling(r)
                  + others_prefilling_requests(r) − 1); known_running(r) =
                  own_in_flight(r) + others_running_requests(r) − known_waiting(r);
                  tokens per request = tokens_per_waiting_request, or when 0
                  the mean uncached tokens this picker sent (2048 before any)
    repeated(r) = min(repeated_prefill_tokens of r's PREFIX_MATCH hint,
                  queued(r) + others_prefill_tokens(r)): queued tokens that
                  repeat this prompt's prefix blocks an earlier queued
                  request on r computes (siblings picked blind to each
                  other), counted once as an engine with prefix caching
                  computes them
    decode(r)   = decode_weight × (own_in_flight(r) − own_prefilling(r)
                  + max(0, others_running − others_prefilling)) × tokens per request
    kv(r)       = kv_weight × pressure(r) × uncached(r)   (the load's KV usage)

With temperature 0 the lowest cost wins. Ties go to fewer requests in flight
(this picker's and the others', or the engine's running count when larger), then to the hint's reason (a
PREFIX_MATCH hint before AFFINITY_HINT before TENANT_HOT before no hint), then
among PREFIX_MATCH hints to the one the cluster ranked first, then at random.
With temperature T > 0 the best (after those ties) and every costlier candidate
are drawn with weight exp(−(cost − best) / (T × prompt tokens)), a weight
below exp(−20) counting as 0. With load_bound > 0 a candidate whose requests in
flight (this picker's and the others') + 1 exceed
ceil(load_bound × (all in flight + 1) / candidates) is passed over while
another is within the bound; the bound is never below load_bound_floor.

Rendezvous: with a key (pick's key, rendezvous_key of the prompt's block
hashes: the hash of its last full block within the first 2,048 tokens) the
ties and the softmax draw are the key's instead of the seed's stream:
candidate r gets G = −ln(−ln u), u = ((splitmix64(key XOR fnv1a64(r)) >> 11)
+ 0.5) / 2^53, and the eligible candidate with the highest −(cost − best) /
(temperature × prompt tokens) + G wins (temperature 0: the tied candidate with
the highest G). Over many keys that is the same softmax (Gumbel-max); for one
key it depends on the state alone, so every gateway that sees the same state
picks the same replica: siblings of one new prefix meet on its
highest-random-weight replica among those within the load bound (contract
§5.10). The picker does no I/O and reads no clock; it is safe to share
between threads.
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
    "DEFAULT_CACHE_AFFINITY_TOKENS",
    "DEFAULT_RUNNING_WEIGHT",
    "DEFAULT_DECODE_WEIGHT",
    "DEFAULT_KV_WEIGHT",
    "DEFAULT_LOAD_BOUND",
    "DEFAULT_LOAD_BOUND_FLOOR",
    "RENDEZVOUS_PREFIX_TOKENS",
    "rendezvous_key",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TOKENS_PER_WAITING_REQUEST",
    "PickerConfig",
    "PickCost",
    "Decision",
    "Inflight",
    "Picker",
]

#: Credit per cached token beyond the prefill it saves (Go DefaultCacheAffinity).
DEFAULT_CACHE_AFFINITY = 1.0
#: Length scale of the cache credit, 0 = linear (Go DefaultCacheAffinityTokens).
DEFAULT_CACHE_AFFINITY_TOKENS = 0.0
#: Weight of the load term: credit per cached token of weight × L × (1 + L),
#: L the candidates' mean requests in prefill; 0 = no load term (Go
#: DefaultCacheAffinityLoad).
DEFAULT_CACHE_AFFINITY_LOAD = 0.5
#: Share of a prefill counted per engine-reported running request (Go DefaultRunningWeight).
DEFAULT_RUNNING_WEIGHT = 0.0
#: Share of a prefill per decoding request (Go DefaultDecodeWeight).
DEFAULT_DECODE_WEIGHT = 0.0
#: Charge per KV-pressure unit and uncached token (Go DefaultKVWeight).
DEFAULT_KV_WEIGHT = 1.0
#: Load bound, 0 = off (Go DefaultLoadBound).
DEFAULT_LOAD_BOUND = 1.5
#: The least the load bound allows, 0 = no floor (Go DefaultLoadBoundFloor).
DEFAULT_LOAD_BOUND_FLOOR = 8.0
#: Tokens of the prompt that name its prefix for the rendezvous (Go RendezvousPrefixTokens).
RENDEZVOUS_PREFIX_TOKENS = 2048
#: Softmax temperature, 0 = lowest cost (Go DefaultTemperature).
DEFAULT_TEMPERATURE = 0.0
#: Softmax weights below exp(-_SOFTMAX_CUT) count as 0.
_SOFTMAX_CUT = 20.0
#: Prefill tokens assumed per engine-reported request before the picker sent any.
DEFAULT_TOKENS_PER_WAITING_REQUEST = 2048.0


@dataclass
class PickerConfig:
    """Configuration of a Picker; the defaults are the tuned ones (Go DefaultPickerConfig).

    tokens_per_waiting_request: prefill tokens assumed per request an engine
        reports that this picker did not send; 0 = the mean uncached tokens of
        the requests this picker sent (2048 before the first).
    cache_affinity: cost −= cache_affinity × cached tokens × the length
        factor below (default 1).
    cache_affinity_tokens: > 0 scales the credit with the cached prefix:
        cache_affinity × cached × (1 + cached / cache_affinity_tokens)
        (Go CacheAffinityTokens); 0 = linear, the default.
    cache_affinity_load: credit += cache_affinity_load × L × (1 + L) × cached
        tokens, L the candidates' mean requests queued for or in prefill: a
        copy of the prefix elsewhere is prefill work that delays every request
        queued behind it, in a single-server queue L × (1 + L) units per unit
        of work (Go CacheAffinityLoad, default 0.5, the generator's choice;
        1 = that delay in full; 0 = no load term).
    running_weight: share of a prefill per engine-reported running request
        not sent by this picker (default 0: such a request is most likely
        decoding, which does not hold up a prefill).
    decode_weight: share of a prefill per decoding request (this picker's and
        the other pickers' reported ones; default 0).
    kv_weight: cost += kv_weight × the load's pressure × uncached tokens
        (default 1).
    load_bound: > 0 caps a candidate's share of requests in flight (this
        picker's and the others') at load_bound × the mean.
    load_bound_floor: the least the bound allows (requests in flight on one
        replica), so siblings of one new prefix can meet on an idle fleet;
        0 = no floor.
    temperature: > 0 draws by softmax over cost with scale temperature ×
        the request's prompt tokens; 0 (the default) picks the lowest cost.
    seed: seeds the choice among equal candidates and the softmax draws;
        None = a random seed. The
        sequence differs from the Go picker's (PCG) for the same seed.
    """

    tokens_per_waiting_request: float = 0.0
    cache_affinity: float = DEFAULT_CACHE_AFFINITY
    cache_affinity_tokens: float = DEFAULT_CACHE_AFFINITY_TOKENS
    cache_affinity_load: float = DEFAULT_CACHE_AFFINITY_LOAD
    running_weight: float = DEFAULT_RUNNING_WEIGHT
    decode_weight: float = DEFAULT_DECODE_WEIGHT
    kv_weight: float = DEFAULT_KV_WEIGHT
    load_bound: float = DEFAULT_LOAD_BOUND
    load_bound_floor: float = DEFAULT_LOAD_BOUND_FLOOR
    temperature: float = DEFAULT_TEMPERATURE
    seed: Optional[int] = None


@dataclass
class PickCost:
    """One candidate's cost terms (prompt tokens, except the request counts).

    cost = queued_tokens + others_tokens − repeated_tokens + uncached_tokens
    − credit(cached_tokens) + decode_tokens + kv_tokens (credit as in the
    module's doc).
    reason is the reason code (pb.ReasonCode int) of the hint naming the
    replica, NO_HINT when none does; reported_waiting/running the engine's
    counts from its hint or load; in_flight this picker's requests there;
    pressure the load's KV usage; others_* the load's others_* (the other
    pickers' reported in-flight load).
    """

    replica: str
    reason: int = pb.NO_HINT
    cached_tokens: int = 0
    uncached_tokens: int = 0
    queued_tokens: float = 0.0
    others_tokens: float = 0.0
    repeated_tokens: float = 0.0
    decode_tokens: float = 0.0
    kv_tokens: float = 0.0
    in_flight: int = 0
    reported_waiting: int = 0
    reported_running: int = 0
    pressure: float = 0.0
    others_prefilling: int = 0
    others_prefill_tokens: int = 0
    others_running: int = 0
    others_pickers: int = 0
    cost: float = 0.0

    def busy(self) -> int:
        """Requests in flight for ties: this picker's and the others', or the engine's running count when larger."""
        return max(self.in_flight + self.others_running, self.reported_running)

    def loaded(self) -> int:
        """Known requests in flight, for the load bound."""
        return self.in_flight + self.others_running


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


_MASK64 = (1 << 64) - 1


def _fnv1a64(s: str) -> int:
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & _MASK64
    return h


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _gumbel(key: int, replica: str) -> float:
    u = (float(_splitmix64(key ^ _fnv1a64(replica)) >> 11) + 0.5) / float(1 << 53)
    return -math.log(-math.log(u))


def rendezvous_key(block_hashes: Sequence[int], block_size: int) -> int:
    """The prompt's rendezvous key: the hash of its last full block within the
    first RENDEZVOUS_PREFIX_TOKENS tokens (the first block when a block is
    longer); 0 (none) without a block or with a block size below 1; a hash of
    0 is taken as 1 (Go RendezvousKey)."""
    if not block_hashes or block_size < 1:
        return 0
    k = min(len(block_hashes), max(1, RENDEZVOUS_PREFIX_TOKENS // block_size))
    return block_hashes[k - 1] or 1


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

    def pick(self, resp: Optional[pb.LookupRouteResponse], candidates: Sequence[str], prompt_tokens: int,
             key: int = 0) -> Decision:
        """Choose one of candidates (replica ids) for a request of prompt_tokens
        tokens given the cluster's response (None = NO_HINT). Hints naming
        replicas that are not candidates are ignored; no candidates gives an
        empty Decision (replica "", index -1). key is the request's
        rendezvous_key (0 = none: ties and draws from the seed's stream)."""
        d = Decision(prompt_tokens=prompt_tokens, costs=[PickCost(replica=c) for c in candidates])
        if not candidates:
            return d
        rc = resp.reason_code if resp is not None else pb.NO_HINT
        hints = list(resp.replicas) if resp is not None else []
        loads = list(resp.loads) if resp is not None else []
        if key and rc == pb.AFFINITY_HINT:
            # The cluster's affinity hashes the whole prompt's prefix, which
            # differs between siblings of one new prefix; the key hashes the
            # leading blocks they share (contract §5.10).
            hints = []
        cfg = self._cfg
        repeated: dict = {}
        with self._mu:
            per_req = self._tokens_per_request()
            ranks: List[int] = []
            total = 0
            prefill = 0  # requests queued for or in prefill, over the candidates
            for c in d.costs:
                rank = len(hints) + 1
                for k, h in enumerate(hints):
                    if h.replica_id != c.replica:
                        continue
                    c.reason, rank = rc, k
                    c.reported_waiting, c.reported_running = h.waiting_requests, h.running_requests
                    if rc == pb.PREFIX_MATCH:
                        c.cached_tokens = min(h.matched_tokens, prompt_tokens)
                        repeated[c.replica] = h.repeated_prefill_tokens
                    break
                for ld in loads:
                    if ld.replica_id != c.replica:
                        continue
                    if rank > len(hints):
                        c.reported_waiting, c.reported_running = ld.waiting_requests, ld.running_requests
                    c.pressure = min(max(ld.pressure, 0.0), 1.0)
                    c.others_prefilling, c.others_prefill_tokens = ld.others_prefilling_requests, ld.others_prefill_tokens
                    c.others_running, c.others_pickers = ld.others_running_requests, ld.others_pickers
                    break
                ranks.append(rank)
                c.uncached_tokens = prompt_tokens - c.cached_tokens
                load = self._load(c.replica)
                c.queued_tokens, c.in_flight = load.queued_tokens, load.inflight
                total += c.loaded()
                known_waiting = max(0, load.prefilling + c.others_prefilling - 1)
                prefill += max(load.prefilling + c.others_prefilling, c.reported_waiting)
                known_running = c.in_flight + c.others_running - known_waiting
                c.others_tokens = c.others_prefill_tokens + (
                    max(0, c.reported_waiting - known_waiting)
                    + cfg.running_weight * max(0, c.reported_running - known_running)
                ) * per_req
                decoding = c.in_flight - load.prefilling + max(0, c.others_running - c.others_prefilling)
                c.decode_tokens = cfg.decode_weight * decoding * per_req
                c.kv_tokens = cfg.kv_weight * c.pressure * c.uncached_tokens
                credit = cfg.cache_affinity * c.cached_tokens
                if cfg.cache_affinity_tokens > 0:
                    credit *= 1 + c.cached_tokens / cfg.cache_affinity_tokens
                c.repeated_tokens = min(float(repeated.get(c.replica, 0)), c.queued_tokens + c.others_prefill_tokens)
                c.cost = (c.queued_tokens + c.others_tokens - c.repeated_tokens + c.uncached_tokens
                          - credit + c.decode_tokens + c.kv_tokens)
            if cfg.cache_affinity_load > 0 and prefill > 0:
                # The load term needs every candidate's prefill queue.
                mean = prefill / len(candidates)
                per_token = cfg.cache_affinity_load * mean * (1 + mean)
                for c in d.costs:
                    c.cost -= per_token * c.cached_tokens
            bound = math.inf
            if cfg.load_bound > 0:
                bound = max(math.ceil(cfg.load_bound * (total + 1) / len(candidates)), cfg.load_bound_floor)
            scale = cfg.temperature * prompt_tokens
            best = self._best(d.costs, ranks, bound, scale, key)
            if best < 0:
                best = self._best(d.costs, ranks, math.inf, scale, key)
        d.replica, d.index = candidates[best], best
        return d

    def _best(self, costs: List[PickCost], ranks: List[int], bound: float, scale: float, key: int) -> int:
        ties: List[int] = []
        for i, c in enumerate(costs):
            if c.loaded() + 1 > bound:
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
        if scale > 0:
            low = costs[ties[0]].cost
            eligible: List[int] = []
            for i, c in enumerate(costs):
                if c.loaded() + 1 > bound:
                    continue
                if (c.cost > low and (c.cost - low) / scale < _SOFTMAX_CUT) or (c.cost == low and i in ties):
                    eligible.append(i)
            if key:
                return max(eligible, key=lambda i: -(costs[i].cost - low) / scale + _gumbel(key, costs[i].replica))
            weights = [math.exp(-(costs[i].cost - low) / scale) if i in eligible else 0.0 for i in range(len(costs))]
            u = self._rng.random() * sum(weights)
            last = -1
            for i, x in enumerate(weights):
                if x == 0:
                    continue
                last = i
                if u < x:
                    return i
                u -= x
            return last
        if len(ties) == 1:
            return ties[0]
        if key:
            return max(ties, key=lambda i: _gumbel(key, costs[i].replica))
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
