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
// backoff and full jitter while someone else holds it, bounded by
// Options.MaxWait and the context. It returns a Lease with:
//
//   - a fencing token (Token), monotonic per entity, issued by a Lua script
//     that runs only while this lease holds the lock;
//   - a context (Context) that a watchdog cancels with cause ErrLost if a
//     refresh finds the lock taken or no refresh succeeds within the TTL, so
//     work under the lock aborts before it commits;
//   - Release, which deletes the lock only if it still holds this lease's
//     random value: releasing an expired lease never deletes the lock of
//     the next holder.
//
// ErrNotObtained (the lock stayed taken: retry later) and ErrLost (the
// lease ended early) are distinct sentinels.
//
// # Built on redislock
//
// Obtaining, refreshing and releasing are github.com/bsm/redislock, and its
// RetryStrategy interface is this package's RetryStrategy. This package adds
// what a saga consumer needs on top: per-entity keys with a Redis Cluster
// hash tag, fencing tokens, the refresh watchdog with a cancellable context,
// and the Postgres side of fencing. Issuing the token takes one more round
// trip after redislock's obtain, because redislock's obtain script cannot be
// extended; the token script checks that the lock is still held, so tokens
// are ordered exactly like the holders.
package lock
