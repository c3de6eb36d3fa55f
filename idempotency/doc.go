// Package idempotency makes a handler's effects happen at most once per
// key, by recording the key in the same Postgres transaction as the effects.
//
// Kafka delivers at least once, and HTTP clients retry. Both are made safe
// the same way: the handler's transaction first claims (scope, key) with a
// hash of the request, then makes its business writes (and enqueues its
// outgoing events), then commits. Either all of it commits or none of it
// does, so:
//
//   - a redelivery finds the committed record and is skipped, receiving the
//     stored response if there is one;
//   - a crash or error before commit leaves no record, so the redelivery does
//     the work;
//   - a concurrent transaction with the same key waits on the table's primary
//     key until the first one finishes, then skips (commit) or does the work
//     (rollback): exactly one effect;
//   - the same key with a different request hash is ErrKeyReused, which is
//     not retryable and never a silent skip.
//
// # Use
//
// Create the table once with migrate.Up (or copy migrate.SQL into your
// migration tool), then either call Claim and Complete inside your own transaction:
//
//	c, err := store.Claim(ctx, tx, "payment", ev.ID, idempotency.Hash(ev.Data))
//	if err != nil || c.Duplicate {
//		return err // nil for a duplicate: skip the work, commit nothing new
//	}
//	// ... business writes in tx ...
//
// or let Do open, run and commit the transaction, as an HTTP handler would
// for an Idempotency-Key header.
//
// A caller that knows its response before doing the work (an id it
// generated up front) stores it with the claim: ClaimWithResponse is Claim
// and Complete in one statement, and QueueNewClaim puts a first-time claim
// into the caller's pgx.Batch, in the same round trip as the work; if the key
// already has a record, the batch fails with ErrKeyExists, writes nothing,
// and ClaimWithResponse in a new transaction decides.
//
// A transaction that handles a batch of events claims all their keys with
// one ClaimAll: one round trip for the whole batch when every key is new, a
// second one when some are duplicates, with the outcome of calling Claim for
// each key in sorted order. It inserts the
// records in sorted key order, so two transactions claiming overlapping
// batches wait for each other instead of deadlocking.
//
// # Retention
//
// Each record expires DefaultRetention (7 days, Kafka's default topic
// retention) after it was claimed; change it with WithRetention. An expired
// record no longer guards its key. Keep the retention longer than any replay
// window you allow (topic retention, consumer-group offset resets), and run
// a Sweeper in each service to delete expired records in small batches.
//
// # Why not a library
//
// The Go idempotency-key packages we know of are HTTP middlewares that own
// their storage and their own transaction (or a cache), so the record cannot
// commit or roll back together with the handler's writes. The guard here has
// to run inside the caller's pgx transaction; it is one table and a few
// statements, kept in this package so that its concurrency behaviour is
// tested against a real Postgres.
package idempotency
