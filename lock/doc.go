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
// # Kept leases
//
// With WithKeep(d), a lease ended by ReleaseInBackground is not released: its Locker keeps
// the lock, idle, for up to d, and the next Acquire of the entity on that Locker (from any
// goroutine) gets it back without a Redis round trip. A consumer's worker whose entity's
// records come a few hundred milliseconds apart, interleaved with other entities' records,
// thus pays the obtain and release scripts once per run of its entity instead of once per
// record. A Lease is therefore one use of a holding: the holding is the lock as held in
// Redis (key, random value, fencing token, watchdog, lost state), served to one Lease at a
// time. Every guarantee holds:
//
//   - Exclusion. A kept holding is held in Redis the whole time (its watchdog keeps
//     refreshing it; idle it refreshes under a background context), so no other Locker
//     can obtain the entity meanwhile. Within the Locker, a holding is in its kept set only
//     while no lease uses it, and the Acquire that takes it out of the set (under the
//     Locker's mutex) is its only user: a concurrent Acquire of the entity finds the lock
//     taken in Redis and retries, checking the kept set before every retry, so it gets the
//     holding once the first user keeps it. Whoever takes a holding out of the set (a
//     reuse, its idle timer, AcquireAll, Wait) owns it; each of the others finds it gone.
//   - Per-use context. Each Acquire gets a new Lease whose Context is derived from its own
//     context (the record's span, correlation id and the worker's stop signal), cancelled
//     when the lease ends (kept or released) and with cause ErrLost if the holding is lost
//     during the use: the watchdog cancels the context of the lease using the holding.
//     A lease ends once (its first Release, ReleaseInBackground or ReleaseAll); a later
//     Release of a lease that ended by being kept does nothing and returns nil, so an old
//     lease can never release a lock that a later lease uses.
//   - Lost locks are never handed out. A holding is kept only while it is not known lost,
//     its validity (last refresh plus TTL) has not passed and the ending lease's context is
//     live (a stopping or revoked worker releases at once); Acquire re-checks the first
//     two when it takes a holding out of the set, and releases (compare-and-delete) a
//     lost one in its own obtain's pipeline instead of reusing it. A holding lost while
//     kept is noticed by its watchdog's next refresh; until then it is not known lost,
//     exactly as for a lease in use, and the fence below rejects its writes if someone
//     else obtained the entity meanwhile.
//   - Fencing. Leases of one holding share its token. The fence check (CheckFence, the
//     consumer's Fence) upserts the token per transaction and row-locks the fence row
//     until the transaction ends, as for any lease; the same token may check any number
//     of times. A higher token can exist only once the kept lock was lost and obtained by
//     someone else. A transaction of the old holding's leases whose upsert comes after
//     the newer holder's (committed or not) fails with ErrStaleToken: it finds the higher
//     token, or waits for the newer holder's row lock and then re-reads the row (READ
//     COMMITTED); one whose upsert came first is ordered before the newer holder's
//     transaction, which waits for it. This is exactly the argument for a lease that was
//     not kept: keeping only lets more transactions carry the same token.
//   - Bounded holding. A holding kept idle for d is released by a timer of its own
//     (released the way background releases are: with the Locker's next acquisition or on
//     its own within a millisecond), Wait releases every kept holding at once, and
//     Release and ReleaseAll always release. AcquireAll does not reuse kept holdings: it
//     releases those of its entities in the pipeline of its obtains, releases first, and
//     obtains all anew, so its all-or-none acquisition and its freedom from deadlock (never
//     waiting while holding part of a set) are unchanged.
//
// The cost is contention across Lockers: another instance that wants a kept entity finds
// it held for up to d after its last use, and waits that long (plus its retry backoff, and
// within its max wait). It is why keeping is an option, off by default: it pays where an
// entity's events mostly reach one consumer (Kafka partitions keyed by the entity, as the
// consumer's Lock assumes), and costs latency where several services or instances share
// an entity's lock namespace and alternate on it. d must be below the TTL, and keeping
// needs the watchdog (WithoutWatchdog would let a reused lease start with almost no
// validity left). A kept holding is still refreshed every refresh period (TTL/3 by
// default); where the client can pipeline, the refreshes of idle kept holdings that fall
// due within an eighth of the period go out together in one round trip (a refresh waits
// at most that long, so the lock stays valid for at least TTL − 9/8 of the period), so
// many kept entities cost a few round trips per period, not one each. A holding in use
// refreshes on its own, as without WithKeep.
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
// Obtaining through github.com/bsm/redislock and issuing the token in a second
// script costs three round trips and a goroutine per lease (about 2x a bare
// SET NX PX + DEL, measured by go run ./bench/guards), and redislock's obtain script cannot be
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
// WithFenceRetention, WithKeep), each documented with its Default* constant. A value
// out of range is an error wrapping ErrInvalidOption returned by New.
package lock
