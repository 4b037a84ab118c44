// Package provisional holds provisional residencies (contract §5.12): the
// blocks of a request a picker (gateway replica) just sent to a replica,
// recorded as that replica's for the request's lifetime, before the
// engine's own KV events reach the index. With them, a sibling request of
// the same instant (an agent's fan-out, many users of one new system
// prompt, a conversation's next turn) is placed with the first one, by
// every gateway, instead of scattering while the events are on their way.
//
// A Pick is one request on one replica: its partition (hash scheme,
// model, tenant, adapter), its prefix block hashes in the index's
// fingerprint (contract §3) and their token counts. A picker sends its
// picks as Pushes: a delta (picks added, picks removed) or a full state
// (every live pick of the picker). Pushes carry a sequence per picker, so
// the store handles order, duplication and loss:
//
//   - a pick is keyed by (picker, pick id): adding it twice holds it once;
//   - a removal arriving before its pick leaves a tombstone, so the late
//     add is ignored;
//   - a full state replaces what the picker's older pushes left (a pick
//     whose removal was lost is dropped; one whose add was lost is added),
//     keeping what newer deltas brought; a full state not newer than the
//     last one held is ignored.
//
// A pick is dropped when the engine's events confirm it (Confirm: the
// confirmed index holds the replica at the pick's depth), when its picker
// removes it (the request failed or was cancelled), or when its age passes
// its max age (Pick.MaxAge, DefaultMaxAge). The store holds at most
// Config.MaxBlocks (pick, block) entries: a push whose picks would pass it
// is refused whole (ErrFull, naming the field and the limit) and nothing
// already held is lost.
//
// A pick also carries the tokens its picker counted as cached on the
// replica, and a picker marks it prefilled at the request's first token
// (Push.Prefilled, or the flag in a full state).
//
// Reads (View.Matches) give, per replica, the deepest block of a lookup's
// chain some pick holds there, with its tokens, and how many tokens the
// picks still before their first token queued although an earlier pick
// there computes the same blocks (Match.Repeated: a picker counts them
// once, contract §5.10). Merge folds those matches
// into a LookupRouteResponse: the one rule the server's lookups and a
// gateway's own table (its picks, seen by its next decision at once)
// share.
//
// The package is pure apart from the clock it is given (Config.Now): no
// I/O and no goroutines. Its owner calls Sweep periodically (reads ignore
// expired picks anyway). A node restart loses the store: picks are soft
// state, re-sent by the pickers' next full state, and the engines' events
// confirm the blocks in the index anyway.
package provisional
