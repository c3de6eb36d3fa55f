// Package consumer runs choreo's Kafka consumers: a franz-go group consumer with one
// worker per partition, and the middleware chain every saga step runs in.
//
// # Embedding
//
// A service builds the standard chain around its business handlers and runs it:
//
//	router := consumer.NewRouter().
//		Handle("order.created", charge).   // func(ctx, tx pgx.Tx, ev event.Event) error
//		Ignore("order.viewed")
//	err := migrate.Up(ctx, pool)                            // the library's tables, at every start
//	archive, err := consumer.NewDeadLetterArchive(pool, "") // choreo_dead_letters
//	h, err := consumer.Standard(consumer.StandardConfig{
//		DB: pool, Router: router, DeadLetter: kafkaClient, Locker: locker,
//		Name: "charge", AfterCommit: []func(){ob.Wake}, DeadLetterArchive: archive,
//	})
//	c, err := consumer.New(brokers, "payment", []string{"orders.events"}, h,
//		consumer.WithDeadLetterTopicCheck()) // Run fails if orders.events.dlq is missing
//	err = c.Run(ctx) // until ctx is cancelled; then a graceful shutdown
//	err = errors.Join(err, locker.Wait(context.WithoutCancel(ctx))) // last lease releases
//
// The business handler receives the transaction explicitly. It makes its writes and
// enqueues its outgoing events with outbox.Enqueue in that transaction, using
// ev.CausedBy(incoming) so that they keep the saga's correlation id and name their cause.
//
// A dead letter the topic refuses (too large, or the topic deleted) would otherwise block
// its partition: with a DeadLetterArchive the original (its first ArchiveValueBytes)
// goes to a Postgres table first, a bounded copy (HeaderDLQTruncated) to the topic when it exists, and the record
// is settled (see DeadLetter). WithDeadLetterTopicCheck makes Run fail at start, with
// ErrMissingTopic, when a dead-letter topic does not exist.
//
// # The chain
//
// Standard wires, outermost first:
//
//	Recover → Tracing → Correlate → Metrics → Logging → DeadLetter → Retry →
//	Recover → Decode → Router.Filter → Upcast → Lock → Idempotent → handler(ctx, tx, event)
//
// What each part does:
//
//   - Recover turns panics into errors matching ErrPanic. Outermost it protects the runtime; just inside
//     Retry it makes a panicking handler's event non-retryable, so it is dead-lettered.
//   - Tracing continues the producer's trace (W3C headers) in a consumer span with the
//     OpenTelemetry messaging attributes; Correlate adds the saga's correlation id and
//     entity id to the context, the span and the logs.
//   - Metrics and Logging report every record's duration, attempts and Outcome.
//   - DeadLetter settles records that cannot be handled: it produces them, with their
//     original key, value and headers and the HeaderDLQ* headers (reason, error, attempts,
//     source topic, partition, offset, group, timestamps), to "<topic>.dlq", waits for the
//     acknowledgement, and lets the partition move on. It sits outside Retry because only
//     the outcome of all attempts decides.
//   - Retry retries retryable errors in place with exponential backoff and full jitter
//     (delay uniform in (0, min(MaxDelay, BaseDelay·2^(n-1))]), bounded by MaxElapsed (1
//     minute by default; MaxAttempts adds a count limit, none by default). Errors are
//     classified with errors.Is/As by Retryable: Permanent errors, event.ErrMalformed,
//     idempotency.ErrKeyReused, ErrUnknownType and panics are never retried;
//     lock.ErrNotObtained, lock.ErrLost and everything else are (lock contention that
//     outlasts the budget is returned as an outage, never dead-lettered). An outage (IsOutage) is
//     neither: Retry returns it at once without spending the budget, DeadLetter passes it
//     through, and the runtime waits it out (see Outages below).
//   - Decode turns the record into an event.Event; the router's filter settles ignored
//     types and rejects unknown ones before any lock or transaction.
//   - Upcast (with StandardConfig.Upcasters) brings an event whose schema version its
//     handler does not declare to one it does, through a chain of upcasters (pure
//     functions on the JSON payload, one per type and version step), after the checks
//     of the record as produced (signature, trust) and before the lock and the
//     transaction; the idempotency claim still hashes the payload as received. A
//     failing upcaster (ErrUpcast) or a version with no path to a declared one
//     (ErrUnsupportedVersion) is dead-lettered. Dead letters keep the original record,
//     so a replay after an upgrade is upcast like a new record. See docs/contracts.md.
//   - Lock holds the entity's Redis lease (package lock) while the transaction runs, to
//     avoid contention; it is not the correctness guard. It acquires the lease on the
//     handling goroutine before the transaction and releases it in the background
//     after; call the Locker's Wait before exiting.
//   - Idempotent is the correctness guard: in one Postgres transaction it claims the
//     event id under the scope "<group>/<name>" with a SHA-256 of type and payload
//     (package idempotency), optionally checks the lease's fencing token, runs the
//     handler and commits. A duplicate is skipped; the same id with another payload is
//     key reuse, dead-lettered.
//
// Standard composes these pieces in this order; a Middleware (func(Handler) Handler) of
// your own wraps the Handler it returns.
//
// # Runtime
//
// New and Run consume a set of topics in a consumer group (franz-go, cooperative-sticky
// balancing by default). Each assigned partition gets a worker goroutine that handles its
// records one at a time in offset order, so the events of one key (one entity) are
// handled in order while partitions run in parallel. The poll loop never blocks on a
// worker: each partition buffers at most WithMaxBuffered records (plus one poll) and its
// fetching is paused (PauseFetchPartitions) while the buffer is full.
//
// Offsets are committed only for settled records, i.e. records whose transaction
// committed or that were dead-lettered: a worker marks a record (kgo.AutoCommitMarks,
// MarkCommitRecords) only after its handler returned nil, and marked offsets are
// committed every 100 ms (WithCommitInterval), so a crash redoes at most the records
// settled since the last commit, which Idempotent skips as duplicates. A handler error means "not settled": the worker hands the
// same record over again after a backoff (WithRetryBackoff, or WithOutageBackoff for
// an outage) and never skips it.
// The poll loop and the rebalance callbacks are serialised (kgo.BlockRebalanceOnPoll,
// released after every poll, which never blocks). When partitions are revoked, their
// workers finish the record in hand (bounded by WithDrainTimeout), buffered records are
// dropped unmarked, and the marked offsets are committed before the callback returns, so
// the next owner starts exactly after the last settled record. When partitions are lost
// (the member was fenced out of the group), their workers stop at once and nothing is
// committed; the next owner redoes at most the unsettled work, which idempotency absorbs.
//
// Cancelling Run's context shuts down gracefully: fetching stops, in-flight handlers
// finish (bounded by WithShutdownTimeout), the settled offsets are committed and the
// member leaves the group.
//
// Every partition worker holds one Postgres connection while its transaction runs. When
// Idempotent's (or StandardBatch's) DB is a *pgxpool.Pool whose MaxConns is below the
// number of partitions the member owns, the handlers log one Warn line per such
// assignment (through the runtime's logger; they look at most once a second) naming both
// numbers and asking for a larger pool; they still run, queueing for connections.
//
// Per-partition lag (high watermark minus the offset after the last settled record) and
// buffered records are exported as OpenTelemetry gauges (choreo.consumer.lag,
// choreo.consumer.buffered; WithMeterProvider) and returned by Consumer.Lag.
//
// # Outages versus poison
//
// Three kinds of failure get three answers. A record the chain can never handle (poison:
// undecodable, unknown type, key reuse, a Permanent error, a panic) is dead-lettered at
// once. A handler failure is retried by Retry within its budget, then dead-lettered. An
// outage is a failure of the infrastructure the chain depends on, not of the record:
// Postgres unreachable, restarting or refusing connections, a serialization failure or
// deadlock, a table or column missing after a bad deploy, Redis unreachable (also when
// the lock fails to be acquired because of it), the broker unavailable for the dead-letter
// produce, or any error wrapping ErrOutage; IsOutage lists exactly what counts.
//
// A confirmed outage (see Outage confirmation) is never dead-lettered and never spends
// the Retry budget. The partition's
// worker keeps the record (and its offset) and hands it to the chain again, without
// limit, after a full-jitter backoff capped at 30 seconds (WithOutageBackoff); fetching
// of that partition pauses once its buffer is full, and other partitions go on. The
// worker logs once at Warn when the partition's outage starts (topic, partition, offset,
// error) and once at Info when it ends (with its duration); the chain's per-record log
// line for an outage is at Debug. While it lasts the choreo.consumer.outage gauge is 1
// for the partition and Consumer.Health returns an error matching ErrOutage that names
// it, for the service's readiness check. A stop (revoke, shutdown) ends the backoff at
// once.
//
// A partition that has lag and has made no progress for the stall timeout
// (WithStallTimeout, 2 minutes by default), whatever the cause (a long outage, a hung
// handler), is stalled: it is logged once at Error with its offset and lag (and once at
// Info when it moves again), the choreo.consumer.stalled gauge is 1, and Health names it.
//
// # Outage confirmation
//
// A failure that looks like an outage can be the record's own: a query that always
// times out for one key (a bad plan, a pathological payload) or always deadlocks,
// while Postgres and Redis serve everyone else. Waited out without limit, it would hold
// its partition for good. So Retry confirms such an outage before it counts as one:
// for a timeout (pgconn.Timeout, a net.Error timeout, a handler's context deadline), a
// deadlock (40P01) or a serialization failure (40001) it probes the dependency the error
// came from (RetryConfig.Probes: Postgres for Postgres errors, every probe for a timeout
// of unknown origin), each probe bounded by Probes.Timeout (DefaultProbeTimeout, 1 s).
// A probe that fails confirms the outage: the record is waited out as above and never
// dead-lettered. When the probes answer, the failure is the record's: it spends the
// retry budget like any retryable error, and when the budget is spent and the record
// has failed so at least Probes.Confirmations times in a row
// (DefaultOutageConfirmations, 5), it is dead-lettered with reason retries_exhausted and
// the last error ("dependencies answered their probes: ..."). Connection failures,
// server shutdowns, missing tables or columns, Redis cluster and replica states, lock
// contention and errors wrapping ErrOutage are never refuted: a single record cannot
// cause them.
//
// Standard probes its DB with Ping when the DB has one (a *pgxpool.Pool); package app
// adds a Redis PING when Redis is configured. Without probes, every outage is waited
// out. A handler call that hangs without a deadline returns nothing to classify; stall
// detection reports it.
//
// # Batch mode
//
// One transaction per event is bounded by the database's commit rate. WithBatch with
// StandardBatch hands up to N buffered records of a partition to one transaction (the
// leases of all their entities in one round trip, all their idempotency claims in one
// statement (a second one reads the records of redelivered keys), one commit), and falls back to the one-at-a-time chain for that batch if
// anything in it fails, so poison records are still isolated and dead-lettered
// individually. Batches form only from records already buffered: a worker that keeps up
// handles one record at a time. See docs/benchmarks.md.
//
// On a *pgxpool.Pool (or *pgx.Conn) the transaction of a record or a batch spends no round
// trip on BEGIN or COMMIT: the BEGIN goes out with the fence check and the claims, the
// COMMIT with the writes deferred to it (the outbox rows: outbox.Enqueue in a handler).
//
// A handler's own writes can ride the COMMIT too: AtCommit(ctx, tx, queue) queues
// statements (balance += amount, an appended row) that go out with it, in the order
// queued and in a batch transaction across its handlers, instead of costing a round trip
// each with tx.Exec. The handler never sees their results; a failing statement fails the
// commit and the handling. A statement with a callback is sent just before the COMMIT,
// so that the callback's error can still roll back. Outside the consumer's transaction
// AtCommit sends at once.
//
// StandardBatch is not a second implementation of the chain: it resolves its
// StandardConfig exactly as Standard does (every default applied once) and runs the same
// parts for each record of a batch: decoding, the router's filter, the consumer span,
// Correlate's context, the metrics and the log line. Only the leases (one per
// distinct entity of the batch), the idempotency claims and the commit are shared.
//
// # Why hand-written parts
//
// Backoff is implemented once for the module (internal/backoff: capped exponential bound,
// full jitter) and shared by Retry, the runtime, the outbox relay and the lock package:
// github.com/cenkalti/backoff randomises around the exponential delay (a randomization
// factor) rather than over the whole interval, and the waits must cooperate with the
// worker's stop signal. The per-partition
// runtime follows franz-go's goroutine-per-partition pattern rather than wrapping a
// framework, because the commit-after-settle and drain-on-revoke rules are the point.
// Spans come from package tracing (W3C propagation compatible with franz-go's kotel).
package consumer
