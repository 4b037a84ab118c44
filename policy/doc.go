// Package policy holds CachePolicy (contract §7.1): the replicated knobs that tune
// matching, ranking, fallbacks and eviction, their defaults and their
// validation. It is pure data; the FSM replicates it and the index reads it.
package policy
