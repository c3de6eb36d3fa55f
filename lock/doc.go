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
//     the next holder. ReleaseInBackground does the same without making the
//     caller wait for the round trip; the Locker's next Acquire of that
//     entity waits for it instead, and Locker.Wait waits for all of them
//     (call it before the process exits).
//
// ErrNotObtained (the lock stayed taken: retry later) and ErrLost (the
// lease ended early) are distinct sentinels.
//
// # Releases ride on the next acquisition
//
// Where the client can pipeline, ReleaseInBackground does not start a round
// trip of its own: it queues the release on its Locker, and the Locker's next
// Acquire (or AcquireAll), from any goroutine, sends every queued release
// script in the same pipeline as its obtain script, releases first. A
// consumer's partition worker under a backlog thus pays one Redis round trip
// per record instead of two. A release that no acquisition takes within a
// short delay (1 ms: an idle worker, a stopped or revoked partition) is sent
// on its own by a timer, and Wait sends the queued releases at once. Every
// guarantee of a background release holds:
//
//   - The release is queued by the caller after its work (for consumer.Lock,
//     after the transaction committed or rolled back), so a lock is never
//     released before its work ended; it is held at most the delay longer
//     than before (plus the round trip), never more than TTL.
//   - The release script is the same compare-and-delete by the lease's random
//     value: a queued release of a lease that expired and was taken over
//     deletes nothing and reports ErrLost, as before.
//   - A queued release of the entity being acquired goes before its obtain in
//     the one pipeline, which Redis runs in order on one connection (one
//     node: both keys carry the entity as hash tag), so the same worker's
//     next record of the entity finds the lock free without waiting. Releases
//     of the entity already in flight elsewhere are waited for, as before; an
//     acquisition that must wait first sends the releases it took on their
//     own, so two acquisitions never wait for each other's carried releases.
//   - The pipeline is not cancelled with the acquiring caller's context (only
//     bounded by its deadline), so a worker stopping mid-acquisition still
//     delivers the releases it carries; a caller whose context has already
//     ended hands them to a goroutine instead.
//   - A Redis error on a carried release is dropped, as for any background
//     release: the lock expires after TTL. The acquisition's own result is
//     its obtain's reply, as before.
//   - Wait (and so app.App's shutdown) still returns only when every
//     background release has ended.
//
// Without pipelining (a custom RedisClient), each background release is a
// goroutine and a round trip of its own, as before.
//
// # Batches
//
// Locker.AcquireAll obtains the leases of a set of entities, all or none,
// and ReleaseAll releases many leases. Where the client can pipeline
// (*redis.Client, *redis.ClusterClient, *redis.Ring) each is one round trip
// for the whole set instead of one per entity: the obtain (or release)
// scripts go out as EVALSHA in one pipeline, and those a fresh or flushed
// script cache answers NOSCRIPT are resent as EVAL. Another client runs the
// scripts one by one. If any entity of the set is held by someone else,
// AcquireAll gives back what it obtained in that attempt before it backs
// off and retries the whole set (WithRetryBackoff, bounded by WithMaxWait
// and the context, as Acquire), so callers whose sets overlap never wait
// while holding part of theirs and cannot deadlock. Duplicates are acquired
// once and empty entities are skipped rather than rejected with
// ErrInvalidEntity. The leases are ordinary Leases, each with its own token,
// watchdog and Context, and come back sorted by entity.
//
// # Why not redislock's Obtain
//
// An earlier version obtained, refreshed and released through
// github.com/bsm/redislock and issued the token in a second script. That cost
// three round trips and a goroutine per lease (about 2x a bare SET NX PX +
// DEL, see docs/benchmarks-guards.md), and redislock's obtain script cannot be
// extended to issue the token in the same step. So this package runs its own
// three short scripts: obtain (SET NX PX and the fencing token, atomically, in
// one round trip, so no other holder can come between a lock and its token),
// refresh and release (both compare the lease's random value before touching
// the key, like redislock's). The watchdog is two timers (time.AfterFunc)
// rather than a goroutine, so a lease that ends before its first refresh
// starts no goroutine at all. What still fits is kept from redislock: New
// accepts its RedisClient interface.
//
// # Options
//
// New takes kgo-style options (WithNamespace, WithTTL, WithRefreshEvery,
// WithoutWatchdog, WithRetryBackoff, WithoutRetry, WithMaxWait,
// WithFenceRetention), each documented with its Default* constant. A value
// out of range is an error wrapping ErrInvalidOption returned by New.
package lock
