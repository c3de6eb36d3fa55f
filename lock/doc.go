// Package lock serialises work on one entity (an order, an account) across
// goroutines, consumers and service instances with a Redis lock, and hands
// out fencing tokens so that Postgres can reject the writes of a holder
// that lost its lock.
//
// # Contention, not correctness
//
// A Redis lock is a performance tool: it makes handlers of the same entity
// take turns, so they rarely conflict in the database and rarely waste a
// transaction. It cannot be the correctness guard. A holder can be paused
// (GC, a slow disk, a stopped VM) past its TTL while someone else takes the
// lock, and then resume and write as if it still held it. The correctness
// guard is the Postgres transaction: the idempotency record, row locks or
// version checks, and optionally the fencing token checked with CheckFence
// in the same transaction, which rejects the stale holder's commit.
//
// # Leases
//
// Locker.Acquire obtains the lock of one entity, retrying with exponential
// backoff and full jitter while someone else holds it (WithRetryBackoff),
// bounded by WithMaxWait and the context. It returns a Lease with:
//
//   - a fencing token (Token), monotonic per entity, issued by the same Lua
//     script that sets the lock, in one round trip;
//   - a context (Context) that a watchdog cancels with cause ErrLost if a
//     refresh finds the lock taken or no refresh succeeds within the TTL, so
//     work under the lock aborts before it commits;
//   - Release, which deletes the lock only if it still holds this lease's
//     random value: releasing an expired lease never deletes the lock of
//     the next holder. ReleaseInBackground does the same in a goroutine;
//     the Locker's next Acquire of that entity waits for it, and
//     Locker.Wait waits for all of them (call it before the process exits).
//
// ErrNotObtained (the lock stayed taken: retry later) and ErrLost (the
// lease ended early) are distinct sentinels.
//
// # Batches
//
// Locker.AcquireAll obtains the leases of a set of entities, all or none,
// and ReleaseAll releases many leases, each in one pipeline for the whole
// set: the scripts go out as EVALSHA, and those a fresh or flushed script
// cache answers NOSCRIPT are resent as EVAL. If any entity of the set is
// held by someone else, AcquireAll gives back what it obtained before it
// backs off and retries the whole set, so callers whose sets overlap never
// wait while holding part of theirs and cannot deadlock.
//
// # Why not redislock's Obtain
//
// github.com/bsm/redislock cannot issue the fencing token in the same atomic
// step as the lock. So this package runs three short scripts of its own:
// obtain (SET NX PX and the token, atomically), refresh and release (both
// compare the lease's random value before touching the key, like
// redislock's). The watchdog is two timers, not a goroutine.
//
// # Options
//
// New takes functional options (With…), each documented with its default; a
// value out of range makes New return an error wrapping ErrInvalidConfig.
package lock
