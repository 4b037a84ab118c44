"""Provisional residencies from a Python gateway (contract §5.12), as the Go
SDK's client.PickShare with the gateway's pick recording: each request a
gateway sends to a replica is pushed to the cluster as a pick (its prefix
blocks on that replica) the moment it is made, so that every other gateway's
lookups hint the replica before the engine's KV events arrive, and siblings
of one new prefix (an agent's fan-out, many users of one new system prompt)
meet on one replica instead of scattering.

A pick needs the request's block hashes: the lookup request after
Client.lookup_tokens (or any request with block_hashes set). A text prompt
sent as prompt_text is keyed on the server, so the gateway has no hashes to
push for it; add() then records nothing and returns 0.

PickShare runs one daemon thread and pushes through a Client;
AsyncPickShare runs one task of the event loop and pushes through an
AsyncClient. The pusher, woken by each add, first token and removal, sends
everything waiting in one push (bounded by push_timeout, never retried) to
every node at once (Client.share_picks), and every full_state_interval the
full state of the live picks for repair: a lost push costs the other
gateways the hint until then, nothing more. It fails open: add() never
blocks, a push that fails is dropped and counted, nothing of it delays or
fails a request.

merge() folds the gateway's own live picks into its lookup's answer by the
server's rule, so its next decision sees a pick at once, before the node has
it.

With a LoadShare given, a push of new picks carries the picker's load report
with their load, and the periodic reports leave it out and wait until the
push is answered: a lookup never sees a replica's new load without the
residency that explains it (contract §5.11, §5.12). That report settles the
turns of the picks' lookups (start(..., turn=resp.turn), contract §5.13).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import unicodedata
from typing import Container, Dict, List, Optional, Tuple

from .loadshare import MAX_PICKER_ID_BYTES, MAX_SETTLED_TURNS, WARN_EVERY
from .picker import Decision, Inflight, Picker
from .v1 import inferencecache_pb2 as pb

#: Seconds between full states by default (Go DefaultFullStateInterval).
DEFAULT_FULL_STATE_INTERVAL = 1.0
#: The bounds on full_state_interval (seconds).
MIN_FULL_STATE_INTERVAL, MAX_FULL_STATE_INTERVAL = 0.05, 60.0
#: The bound on one push (seconds): a pick older than this is worth little to
#: the other gateways, and the next full state repairs it.
DEFAULT_PUSH_TIMEOUT = 0.25
#: How long a pick is held by default (seconds), and the server's bounds.
DEFAULT_MAX_AGE = 10.0
MIN_MAX_AGE, MAX_MAX_AGE = 0.1, 600.0
#: The server's bound on one pick's chain (blocks), on an id (bytes of UTF-8)
#: and on a block's tokens.
MAX_BLOCKS_PER_PICK = 8192
MAX_ID_BYTES = 256
MAX_BLOCK_TOKENS = 4096
#: The (pick, block) entries the live picks may hold (Go's
#: provisional.DefaultMaxBlocks); a pick past it is not recorded (unshared).
MAX_LIVE_BLOCKS = 1 << 20
#: Picks, first tokens and removals waiting to be pushed; past it the oldest
#: waiting are dropped (counted): the next full state repairs them.
QUEUE = 4096

#: The details a merged answer carries (Go provisional.DetailProvisional and
#: DetailAlsoProvisional, contract §5.12).
DETAIL_PROVISIONAL = ("provisional prefix match: a gateway sent this prefix to the replica and its engine's "
                      "events have not confirmed it yet")
DETAIL_ALSO_PROVISIONAL = " (with provisional residencies: picks not yet confirmed by the engines' events)"

log = logging.getLogger("inference_cache.pickshare")


def _id_problem(v: str) -> str:
    """Why the server refuses v as an id (provisional/pick.go, pickerload
    IDProblem), or ""."""
    if len(v.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        return f"{len(v.encode('utf-8', 'surrogatepass'))} bytes, over the limit of {MAX_ID_BYTES}"
    for i, ch in enumerate(v):
        cat = unicodedata.category(ch)
        if cat == "Cc":
            return f"holds control character U+{ord(ch):04X} at character {i}"
        if cat in ("Cf", "Cs"):
            return f"holds invisible format character U+{ord(ch):04X} at character {i}"
    if v and not v.strip():
        return "blank (only whitespace)"
    return ""


def pick_problem(msg: pb.ProvisionalPick) -> str:
    """Why the server would refuse msg (contract §5.12, provisional/pick.go),
    naming the field, or "". One refused pick fails its whole push, so the
    pusher never sends one."""
    if not msg.replica_id:
        return "replica_id: required"
    for name in ("replica_id", "hash_scheme", "model_id", "tenant_id", "adapter_id"):
        v = getattr(msg, name)
        if v and (why := _id_problem(v)):
            return f"{name}: {why}"
    if not msg.hash_scheme:
        return "hash_scheme: required (the index partition's hash scheme, e.g. vllm)"
    if not msg.block_hashes:
        return "block_hashes: required: at least one full block"
    if len(msg.block_hashes) > MAX_BLOCKS_PER_PICK:
        return f"block_hashes: {len(msg.block_hashes)} blocks, over the limit of {MAX_BLOCKS_PER_PICK}"
    counts = msg.block_token_counts
    if counts and len(counts) != len(msg.block_hashes):
        return f"block_token_counts: {len(counts)} counts for {len(msg.block_hashes)} block_hashes"
    for j, c in enumerate(counts):
        if not 1 <= c <= MAX_BLOCK_TOKENS:
            return f"block_token_counts[{j}]: {c}: want 1 to {MAX_BLOCK_TOKENS}"
    return ""


def _tokens(v) -> int:
    """v as a token count: a finite number ≥ 0, at most 2³² − 1; else ValueError."""
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{v!r}: not a finite number")
    return max(0, min(int(f), 2**32 - 1))


class _Pick:
    """One live pick: its wire form without age, when it was made
    (monotonic seconds), whether its request has its first token, and the
    load held out of the load reports until its push is answered."""

    __slots__ = ("msg", "made", "prefilled")

    def __init__(self, msg: pb.ProvisionalPick, made: float) -> None:
        self.msg, self.made, self.prefilled = msg, made, False


class SharedInflight:
    """An Inflight whose pick is shared: first_token() also tells the cluster
    that the pick's prefill no longer queues its replica, fail() removes the
    pick (the request failed or was cancelled before its first token, or went
    elsewhere) and ends the request. pick_id is 0 when nothing was shared."""

    def __init__(self, flight: Inflight, share: "_Picks", pick_id: int) -> None:
        self._flight, self._share, self.pick_id = flight, share, pick_id

    def first_token(self) -> None:
        self._flight.first_token()
        if self.pick_id:
            self._share.prefilled(self.pick_id)

    def done(self) -> None:
        """The request ended (its last token)."""
        self._flight.done()

    def fail(self) -> None:
        """The request failed or was cancelled: its pick is removed."""
        if self.pick_id:
            self._share.remove(self.pick_id)
        self._flight.done()


class _Picks:
    """The state both pushers share: the checked settings, the live picks,
    what waits to be pushed, and the counters: pushes (answered by a node),
    full (full states among them), failed (failed or timed out, dropped),
    dropped (queued items dropped from a full queue), unshared (add() calls
    that recorded nothing, see add()). Raises ValueError naming picker_id,
    full_state_interval, max_age or push_timeout when out of bounds."""

    def __init__(self, client, picker_id: str, full_state_interval: float = DEFAULT_FULL_STATE_INTERVAL,
                 max_age: float = DEFAULT_MAX_AGE, push_timeout: float = DEFAULT_PUSH_TIMEOUT,
                 load_share=None) -> None:
        if client is None:
            raise ValueError("pick share: needs a client")
        if not picker_id:
            raise ValueError("picker_id: required (the load share's picker id)")
        n = len(picker_id.encode("utf-8"))
        if n > MAX_PICKER_ID_BYTES:
            raise ValueError(f"picker_id: {n} bytes, over the limit of {MAX_PICKER_ID_BYTES}")
        full_state_interval = full_state_interval or DEFAULT_FULL_STATE_INTERVAL
        if not MIN_FULL_STATE_INTERVAL <= full_state_interval <= MAX_FULL_STATE_INTERVAL:
            raise ValueError(f"full_state_interval: {full_state_interval} s; must be {MIN_FULL_STATE_INTERVAL} "
                             f"to {MAX_FULL_STATE_INTERVAL} s")
        max_age = max_age or DEFAULT_MAX_AGE
        if not MIN_MAX_AGE <= max_age <= MAX_MAX_AGE:
            raise ValueError(f"max_age: {max_age} s; must be {MIN_MAX_AGE} to {MAX_MAX_AGE} s")
        if not push_timeout > 0:
            raise ValueError(f"push_timeout: {push_timeout} s; must be above 0")
        self._client, self.picker_id = client, picker_id
        self.full_state_interval, self.max_age, self.push_timeout = full_state_interval, max_age, push_timeout
        self.pushes = self.full = self.failed = self.dropped = self.unshared = 0
        # Ids and sequences count from the clock, so a gateway restarted under
        # the same picker id is ahead of its old pushes and reuses no pick id.
        self._next_id = self._seq = time.time_ns()
        self._mu = threading.Condition()
        self._live: Dict[int, _Pick] = {}
        self._adds: List[int] = []
        self._removed: List[int] = []
        self._prefilled: List[int] = []
        # pick id → (replica, uncached tokens, its Inflight or None): not reported yet
        self._held: Dict[int, Tuple[str, float, Optional[Inflight]]] = {}
        self._blocks = 0  # the live picks' blocks
        self._unshared_warned_at = -math.inf
        self._stopping = False
        self._warned_at = -math.inf
        # The times of the last two full states: a full state carries the
        # hashes of the picks made since the one before the last, so each
        # pick's hashes go out in its own push and two full states.
        self._full_at = [-math.inf, -math.inf]
        self._quiet = False  # the last full state was empty and nothing was pushed since
        self._turns: List[int] = []  # the turns of the picks waiting to be pushed
        self._load_share = load_share
        if load_share is not None:
            load_share.hold(self.held)

    def add(self, req: pb.LookupRouteRequest, replica: str, cached_tokens: int = 0,
            uncached_tokens: int = 0, flight: Optional[Inflight] = None, turn: int = 0) -> int:
        """Record that the gateway sent the request looked up with req (its
        block_hashes, block_token_counts and partition) to replica, which
        held cached_tokens of its prompt when picked, and queue the pick's
        push; it never blocks or raises. The request's load (uncached_tokens
        prefilling, or what flight, its Inflight, has left of it) is held out
        of the load reports until the push is answered; with a load share the
        push carries the picker's report with that load, which settles turn
        (the lookup's LookupRouteResponse.turn, contract §5.13; 0 = none).
        A turn whose pick is not recorded is settled by the load share's
        next report. Returns the pick id,
        or 0 when nothing was recorded (counted in unshared): no block
        hashes, a pick the server would refuse (pick_problem: an id over 256
        bytes or with a control character, no hash_scheme, …), the live
        picks at MAX_LIVE_BLOCKS, or the pusher stopped."""
        try:
            msg = pb.ProvisionalPick(replica_id=replica, hash_scheme=req.hash_scheme, model_id=req.model_id,
                                     tenant_id=req.tenant_id, adapter_id=req.adapter_id,
                                     block_hashes=req.block_hashes, max_age_ms=round(self.max_age * 1000),
                                     cached_tokens=_tokens(cached_tokens))
            if any(c != 16 for c in req.block_token_counts):
                msg.block_token_counts.extend(req.block_token_counts)
            uncached = float(_tokens(uncached_tokens))
            why = pick_problem(msg)
        except (AttributeError, TypeError, ValueError, OverflowError) as e:
            why = f"bad input: {e}"
        with self._mu:
            if why or self._stopping or self._blocks + len(msg.block_hashes) > MAX_LIVE_BLOCKS:
                self.unshared += 1
                if why and not why.startswith("block_hashes: required"):
                    self._warn_unshared(why)  # no hashes (a text prompt) is expected, not news
                recorded = False
            else:
                recorded = True
                self._next_id += 1
                msg.pick_id = pid = self._next_id
                self._live[pid] = _Pick(msg, time.monotonic())
                self._blocks += len(msg.block_hashes)
                self._held[pid] = (replica, uncached, flight)
                if type(turn) is int and turn > 0 and self._load_share is not None:
                    self._turns.append(turn)
                    del self._turns[:-MAX_SETTLED_TURNS]
                self._queue(self._adds, pid)
        if not recorded:
            if self._load_share is not None:
                self._load_share.settle(turn)
            return 0
        return pid


    def _warn_unshared(self, why: str) -> None:
        # Under _mu.
        now = time.monotonic()
        if now - self._unshared_warned_at >= WARN_EVERY:
            self._unshared_warned_at = now
            log.warning("pick not shared (the server would refuse it; the request is unaffected): %s "
                        "picker_id=%s unshared_so_far=%d", why, self.picker_id, self.unshared)

    def merge(self, resp: Optional[pb.LookupRouteResponse], req: pb.LookupRouteRequest) -> pb.LookupRouteResponse:
        """resp (None = no answer) with this gateway's own live picks on req's
        chain folded in by the server's rule (contract §5.12, Go
        provisional.Merge), so that its next decision sees a pick at once,
        not a round trip later: per replica the deepest block of the chain
        a pick holds; a match no deeper than the replica's confirmed
        PREFIX_MATCH hint leaves that hint (its repeated_prefill_tokens the
        larger); otherwise the hint (made when absent) takes the match's
        blocks and tokens, score = tokens, provisional set; an answer that
        was not a PREFIX_MATCH becomes one of these hints alone; hints by
        score (not cut: the node cut its answer). The picks a confirmed hint covers
        whole are dropped (the engine's events arrived). Returns resp itself
        when no pick matches (a NO_HINT when resp is None), else a merged
        copy."""
        matches = self._matches(req)
        if not matches:
            return resp if resp is not None else pb.LookupRouteResponse(reason_code=pb.NO_HINT)
        out = pb.LookupRouteResponse(reason_code=pb.NO_HINT)
        if resp is not None:
            out.CopyFrom(resp)
        prefix = out.reason_code == pb.PREFIX_MATCH
        made = 0
        for replica, blocks, tokens, age, repeated in matches:
            h = next((x for x in out.replicas if x.replica_id == replica), None) if prefix else None
            if h is not None and not h.provisional and h.matched_blocks >= blocks:
                h.repeated_prefill_tokens = max(h.repeated_prefill_tokens, repeated)
                self._confirm(req, replica, h.matched_blocks)
                continue
            if made == 0 and not prefix:
                del out.replicas[:]
            if h is None:
                h = out.replicas.add(replica_id=replica)
                for ld in out.loads:
                    if ld.replica_id == replica:
                        h.waiting_requests, h.running_requests, h.pressure = (ld.waiting_requests, ld.running_requests,
                                                                              ld.pressure)
                        break
            if not h.provisional:
                h.repeated_prefill_tokens = 0
            h.repeated_prefill_tokens = max(h.repeated_prefill_tokens, repeated)
            h.matched_blocks, h.matched_tokens = blocks, tokens
            h.freshness, h.score, h.age_ms, h.provisional = 1.0, float(tokens), age, True
            h.ClearField("factors")
            made += 1
        if made == 0:
            return out
        if prefix:
            if not out.detail.endswith(DETAIL_ALSO_PROVISIONAL):
                out.detail += DETAIL_ALSO_PROVISIONAL
        else:
            out.reason_code, out.detail = pb.PREFIX_MATCH, DETAIL_PROVISIONAL
        # Not cut: the node cut its answer already, and every replica a pick
        # of this gateway's reaches counts for its next decision (as Go's
        # gateway merges its own table).
        hints = sorted(out.replicas, key=lambda x: (-x.score, x.replica_id))
        kept = [pb.ReplicaHint() for _ in hints]
        for k, h in zip(kept, hints):
            k.CopyFrom(h)
        del out.replicas[:]
        out.replicas.extend(kept)
        return out

    def _confirm(self, req: pb.LookupRouteRequest, replica: str, blocks: int) -> None:
        """Drop the live picks on replica whose whole chain lies within the
        first blocks of req's chain, which the confirmed index holds there
        (the engine's events arrived), as Go's provisional Store.Confirm:
        the node drops its copy the same way, and the next full state no
        longer lists them."""
        chain = list(req.block_hashes[:blocks])
        part = (req.hash_scheme, req.model_id, req.tenant_id, req.adapter_id)
        with self._mu:
            queued = set(self._adds)  # not pushed yet: they go out first, as Go's pusher sends its copy
            gone = [pid for pid, k in self._live.items()
                    if pid not in queued and k.msg.replica_id == replica and len(k.msg.block_hashes) <= len(chain)
                    and (k.msg.hash_scheme, k.msg.model_id, k.msg.tenant_id, k.msg.adapter_id) == part
                    and list(k.msg.block_hashes) == chain[:len(k.msg.block_hashes)]]
            for pid in gone:
                self._blocks -= len(self._live.pop(pid).msg.block_hashes)
                self._held.pop(pid, None)

    def _matches(self, req: pb.LookupRouteRequest) -> List[Tuple[str, int, int, int, int]]:
        """Per replica (id ascending) the deepest match of req's chain among
        the live picks of its partition: (replica, blocks, tokens, age in ms
        of the youngest pick reaching that depth, repeated prefill tokens),
        as Go's provisional View.Matches, picks taken in the order made."""
        chain = list(req.block_hashes) if req is not None else []
        if not chain:
            return []
        part = (req.hash_scheme, req.model_id, req.tenant_id, req.adapter_id)
        now = time.monotonic()
        with self._mu:
            picks = [(pid, k.msg, k.made, k.prefilled) for pid, k in sorted(self._live.items())
                     if now - k.made < self.max_age]
        found: Dict[str, List[int]] = {}  # replica → [blocks, tokens, age, repeated, covered]
        for _, msg, made, prefilled in picks:
            if (msg.hash_scheme, msg.model_id, msg.tenant_id, msg.adapter_id) != part:
                continue
            hashes = msg.block_hashes
            if hashes[0] == chain[0]:
                depth = 0
                for a, b in zip(hashes, chain):
                    if a != b:
                        break
                    depth += 1
            elif len(chain) == 1 and hashes[-1] == chain[0]:
                depth = len(hashes)  # a lookup by its prefix hash alone names the pick's whole prefix
            else:
                continue
            counts = msg.block_token_counts
            tokens = sum(counts[:depth]) if counts else 16 * depth
            age = max(0.0, now - made)
            x = found.get(msg.replica_id)
            if x is None:
                found[msg.replica_id] = [depth, tokens, age, 0, tokens]
                continue
            if not prefilled and msg.cached_tokens < min(tokens, x[4]):
                x[3] += min(tokens, x[4]) - msg.cached_tokens
            x[4] = max(x[4], tokens)
            if depth > x[0] or depth == x[0] and age < x[2]:
                x[0], x[1], x[2] = depth, tokens, age
        return [(r, x[0], x[1], int(x[2] * 1000), x[3]) for r, x in sorted(found.items())]

    def start(self, picker: Picker, d: Decision, req: pb.LookupRouteRequest, turn: int = 0) -> SharedInflight:
        """picker.start(d) and add() of its pick: the chosen candidate's
        cached and uncached tokens, and turn, the lookup's
        LookupRouteResponse.turn (0 = none), settled by the pick's push. An
        empty Decision shares nothing and settles its turn with the next
        load report."""
        flight = picker.start(d)
        if d.index < 0 or d.index >= len(d.costs):
            if self._load_share is not None:
                self._load_share.settle(turn)
            return SharedInflight(flight, self, 0)
        c = d.costs[d.index]
        return SharedInflight(flight, self, self.add(req, d.replica, c.cached_tokens, c.uncached_tokens, flight, turn))

    def prefilled(self, pick_id: int) -> None:
        """Queue the news that the pick's request has its first token; it
        never blocks. A lost one is repaired by the next full state."""
        if type(pick_id) is not int:
            return
        with self._mu:
            k = self._live.get(pick_id)
            if k is None or k.prefilled:
                return
            k.prefilled = True
            self._queue(self._prefilled, pick_id)

    def remove(self, pick_id: int) -> None:
        """Queue the removal of a pick; it never blocks."""
        if type(pick_id) is not int:
            return
        with self._mu:
            k = self._live.pop(pick_id, None)
            if k is None:
                return
            self._blocks -= len(k.msg.block_hashes)
            self._held.pop(pick_id, None)
            self._queue(self._removed, pick_id)

    def held(self, pushing: Container[int] = ()) -> List[Tuple[str, int, float, int]]:
        """The load of the picks whose push has not been answered yet, each
        (replica, prefilling requests, prefill tokens, running requests) as
        its request stands now (a request past its first token no longer
        prefills; one done holds nothing): LoadShare leaves it out of its
        reports (in_flight). pushing: pick ids left out of the list, the
        picks of the push whose carried report counts their load."""
        out = []
        with self._mu:
            rows = [v for pid, v in self._held.items() if pid not in pushing]
        for replica, tokens, flight in rows:
            if flight is None:
                out.append((replica, 1, tokens, 1))
                continue
            prefilling = not flight._first_seen
            running = not flight._ended
            if prefilling or running:
                out.append((replica, int(prefilling), tokens if prefilling else 0.0, int(running)))
        return out

    def _queue(self, q: List[int], pid: int) -> None:
        # Under _mu.
        if len(q) >= QUEUE:
            dropped = q.pop(0)
            if q is self._adds:
                self._held.pop(dropped, None)  # never pushed as a delta: its load is reported
            self.dropped += 1
        q.append(pid)
        self._wake()

    def _wake(self) -> None:
        # Under _mu: the pusher has work.
        raise NotImplementedError

    def _pending(self) -> bool:
        # Under _mu.
        return bool(self._adds or self._removed or self._prefilled)

    def _pushed(self, delta: pb.SharePicksRequest, ok: bool) -> None:
        """Answered (ok) or dropped: the delta's picks' load is reported from
        now on, and the periodic reports go on (settling the carried
        report's turns when the push failed)."""
        with self._mu:
            for p in delta.picks:
                self._held.pop(p.pick_id, None)
        if delta.HasField("load"):
            self._load_share.answered(delta.load, ok)

    def _carry(self, delta: pb.SharePicksRequest, turns: List[int]) -> None:
        """With a load share, a delta of new picks carries the picker's load
        report, their load included, settling turns (contract §5.12, §5.13);
        turns without such a delta are settled by the next report."""
        if self._load_share is None:
            return
        load = None
        if delta.picks:
            load = self._load_share.carried(turns, self.held({p.pick_id for p in delta.picks}))
        if load is not None:
            delta.load.CopyFrom(load)
            return
        for t in turns:
            self._load_share.settle(t)

    def _full_if_due(self, due: float) -> Tuple[Optional[pb.SharePicksRequest], float]:
        """The full state to push when due (monotonic seconds) has passed, or
        None (not due, or an empty one after an empty one), and when the next
        is due."""
        now = time.monotonic()
        if now < due:
            return None, due
        with self._mu:
            if self._stopping:
                return None, due
            return self._full_state(), now + self.full_state_interval

    def _next(self, req: pb.SharePicksRequest) -> None:
        with self._mu:
            self._seq += 1
            req.sequence = self._seq

    def _outcome(self, req: pb.SharePicksRequest, err: Optional[BaseException]) -> None:
        with self._mu:
            if err is None:
                self.pushes += 1
                if req.full_state:
                    self.full += 1
                return
            self.failed += 1
            failed = self.failed
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            log.warning("provisional picks push failed; the other gateways see this one's picks once a push "
                        "or the next full state succeeds (requests are unaffected): picker_id=%s err=%s "
                        "failed_so_far=%d", self.picker_id, err, failed)

    def _delta(self) -> Tuple[Optional[pb.SharePicksRequest], List[int]]:
        # Under _mu: everything waiting, or None, and the turns its picks settle.
        if not self._pending():
            return None, []
        self._quiet = False
        now = time.monotonic()
        req = pb.SharePicksRequest(picker_id=self.picker_id, removed=self._removed, prefilled=self._prefilled)
        for pid in self._adds:
            k = self._live.get(pid)
            if k is not None:
                p = req.picks.add()
                p.CopyFrom(k.msg)
                p.age_ms = min(2**32 - 1, round((now - k.made) * 1000))
        self._adds, self._removed, self._prefilled = [], [], []
        turns, self._turns = self._turns, []
        return req, turns

    def _full_state(self) -> Optional[pb.SharePicksRequest]:
        # Under _mu: the live picks (expired ones dropped), hashes for those
        # made since the full state before the last; None after an empty one
        # with nothing pushed since.
        now = time.monotonic()
        for pid in [pid for pid, k in self._live.items() if now - k.made >= self.max_age]:
            self._blocks -= len(self._live.pop(pid).msg.block_hashes)
            self._held.pop(pid, None)
        if not self._live and self._quiet:
            return None
        self._quiet = not self._live
        since = self._full_at[0]
        self._full_at = [self._full_at[1], now]
        req = pb.SharePicksRequest(picker_id=self.picker_id, full_state=True)
        for pid in sorted(self._live):
            k = self._live[pid]
            p = req.picks.add()
            p.CopyFrom(k.msg)
            if k.made < since:
                del p.block_hashes[:]
                del p.block_token_counts[:]
            p.age_ms = min(2**32 - 1, round((now - k.made) * 1000))
            p.prefilled = k.prefilled
        return req



class PickShare(_Picks):
    """Pushes a gateway's picks through client (a Client: share_picks) under
    picker_id, the id of its load reports (LoadShare.picker_id), from a
    daemon thread. With load_share (a LoadShare), a pick's load is left out
    of its reports until the pick's push is answered."""

    def __init__(self, client, picker_id: str, full_state_interval: float = DEFAULT_FULL_STATE_INTERVAL,
                 max_age: float = DEFAULT_MAX_AGE, push_timeout: float = DEFAULT_PUSH_TIMEOUT,
                 load_share=None) -> None:
        super().__init__(client, picker_id, full_state_interval, max_age, push_timeout, load_share)
        self._thread = threading.Thread(target=self._run, name="inference-cache-pickshare", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        self._mu.notify()

    def _run(self) -> None:
        next_full: Optional[float] = time.monotonic() + self.full_state_interval
        while next_full is not None:
            try:
                next_full = self._round(next_full)
            except Exception:  # a bug must not end the pushes; the next full state repairs
                log.exception("provisional picks pusher: a round failed; going on")
                time.sleep(0.01)

    def _round(self, next_full: float) -> Optional[float]:
        """One wait and its pushes: when the next full state is due, or None
        once stopping."""
        with self._mu:
            while not self._stopping and not self._pending():
                wait = next_full - time.monotonic()
                if wait <= 0:
                    break
                self._mu.wait(wait)
            if self._stopping:
                return None
            delta, turns = self._delta()
        if delta is not None:
            ok = False
            try:
                self._carry(delta, turns)
                ok = self._push(delta)
            finally:
                self._pushed(delta, ok)
        full, next_full = self._full_if_due(next_full)
        if full is not None:
            self._push(full)
        return next_full

    def _push(self, req: pb.SharePicksRequest) -> bool:
        """Send req once; whether a node answered."""
        self._next(req)
        try:
            self._client.share_picks(req, timeout=self.push_timeout)
        except Exception as e:  # dropped: the next full state repairs it
            self._outcome(req, e)
            return False
        self._outcome(req, None)
        return True

    def stop(self) -> None:
        """End the pushes (idempotent): returns once the push in flight has
        ended, within about twice push_timeout (a delta a node missed is
        sent once more); no full state follows. The cluster drops the picks
        at their max age, or sooner as the engines' events confirm them.
        add() records nothing from then on."""
        with self._mu:
            self._stopping = True
            self._mu.notify()
        self._thread.join()

    def __enter__(self) -> "PickShare":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class AsyncPickShare(_Picks):
    """PickShare for asyncio: pushes through an AsyncClient (share_picks)
    from a task of the running loop (create it inside the loop). add(),
    prefilled() and remove() never block and may be called from any thread;
    await stop(), which cancels the push in flight."""

    def __init__(self, client, picker_id: str, full_state_interval: float = DEFAULT_FULL_STATE_INTERVAL,
                 max_age: float = DEFAULT_MAX_AGE, push_timeout: float = DEFAULT_PUSH_TIMEOUT,
                 load_share=None) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("AsyncPickShare: create it inside a running event loop (or use PickShare)") from None
        super().__init__(client, picker_id, full_state_interval, max_age, push_timeout, load_share)
        self._loop = loop
        self._event = asyncio.Event()
        self._task = self._loop.create_task(self._run())

    def add(self, req: pb.LookupRouteRequest, replica: str, cached_tokens: int = 0,
            uncached_tokens: int = 0, flight: Optional[Inflight] = None, turn: int = 0) -> int:
        if self._loop.is_closed() or self._task.done():
            with self._mu:
                self.unshared += 1  # nothing would push it
            if self._load_share is not None:
                self._load_share.settle(turn)
            return 0
        return super().add(req, replica, cached_tokens, uncached_tokens, flight, turn)

    add.__doc__ = _Picks.add.__doc__

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:
            pass  # the loop has closed: nothing pushes any more

    async def _run(self) -> None:
        next_full: Optional[float] = time.monotonic() + self.full_state_interval
        while next_full is not None:
            try:
                next_full = await self._round(next_full)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the pushes; the next full state repairs
                log.exception("provisional picks pusher: a round failed; going on")
                await asyncio.sleep(0.01)

    async def _round(self, next_full: float) -> Optional[float]:
        """One wait and its pushes: when the next full state is due, or None
        once stopping."""
        with self._mu:
            pending = self._pending()
        if not pending:
            try:
                await asyncio.wait_for(self._event.wait(), max(0.0, next_full - time.monotonic()))
            except asyncio.TimeoutError:
                pass
        self._event.clear()
        with self._mu:
            if self._stopping:
                return None
            delta, turns = self._delta()
        if delta is not None:
            ok = False
            try:
                self._carry(delta, turns)
                ok = await self._push(delta)
            finally:
                self._pushed(delta, ok)
        full, next_full = self._full_if_due(next_full)
        if full is not None:
            await self._push(full)
        return next_full

    async def _push(self, req: pb.SharePicksRequest) -> bool:
        """Send req once; whether a node answered."""
        self._next(req)
        try:
            await self._client.share_picks(req, timeout=self.push_timeout)
        except asyncio.CancelledError as e:
            task = asyncio.current_task()
            if self._stopping or (task is not None and task.cancelling()):
                raise  # stop(): this task is being cancelled
            self._outcome(req, e)  # the call was cancelled (its client closed): dropped
            return False
        except Exception as e:  # dropped: the next full state repairs it
            self._outcome(req, e)
            return False
        self._outcome(req, None)
        return True

    async def stop(self) -> None:
        """End the pushes (idempotent): the push in flight is cancelled."""
        with self._mu:
            self._stopping = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
