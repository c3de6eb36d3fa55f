// Package outbox implements the transactional outbox: a service stores the
// events it emits in the same Postgres transaction as its business writes
// ([Outbox.Enqueue]), and a [Relay] publishes the committed rows to Kafka and
// deletes them once the broker has acknowledged them. An event is therefore
// published if and only if the transaction that produced it committed, at
// least once, in per-key order.
//
// # Writing
//
// Enqueue takes the caller's pgx.Tx and stores, per event, the Kafka record
// the relay will produce: topic, key (the event's subject, i.e. the entity
// id), the CloudEvents binary-mode headers, the W3C trace context of the
// current span (so the trace continues through the relay) and the payload.
// After COMMIT, call [Outbox.Wake] — or use [Outbox.InTx], which does.
//
// [Outbox.Queue] adds the same insert to a pgx.Batch instead: a batch sent
// outside an explicit transaction runs in one implicit transaction, so an
// entity's rows and its events commit together in a single round trip with no
// BEGIN and COMMIT (the order service's POST /orders writes its order this way).
// When the relay of the same Outbox ([NewRelay]) leads in the same process, Wake
// signals it in memory; otherwise, with [WithNotifier], the relay is told by a
// NOTIFY, at most one every [NotifySpacing]. The first after a quiet spell rides
// the writer's own commit when it can: in a transaction whose rows go out with the
// COMMIT (the consumer's, InTx's) or in a Queue batch, a pg_notify is queued with the
// rows, so it costs no round trip and no transaction, and the Wake after that commit
// sends nothing. Every other Wake sends one coalesced NOTIFY after the commit, a
// transaction of its own (at most one in flight, at least NotifySpacing apart).
// NOTIFYs are never sent from every transaction: Postgres serialises the commits
// that carry one on a global lock, which cost 12–15% of throughput on our 2-core
// machines when a trigger notified on every insert. Without a leader in the process
// or a notifier, the relay's poll finds the rows.
//
// # Relaying
//
// Every relay campaigns for a session-level advisory lock on a dedicated
// connection; the holder leads, the others stand by and retry every
// [WithTakeoverInterval] (default 1s). The leader does all of its reads and
// deletes on the session that holds the lock, so the moment that session
// ends (crash, network loss, pg_terminate_backend) no statement of the
// deposed leader can succeed, and a standby takes over within about a
// second. A second connection LISTENs for NOTIFYs and reconnects by itself;
// the leader also polls every [WithPollInterval] (default 500ms), so a lost
// notification or listen connection delays rows by at most that much.
//
// The leader reads rows in id order in batches of at most [WithBatchSize]
// (default 1000; fewer of a topic whose max.message.bytes is below the client's
// batch size, see Failures), produces them with the caller's franz-go client, waits for
// every acknowledgement, and deletes the acknowledged rows in one statement
// (pipelined with the next read). While a full batch is in flight, or when
// a wake-up arrives during one, the next batch is read already, excluding the
// in-flight ids by value; it is produced only after the whole batch in flight
// was acknowledged. The relay keeps draining full batches while rows remain
// and goes back to waiting only when a read comes back empty. After a small
// batch (under 64 rows) the next read waits until [WithBatchLinger] (default
// 3 ms) has passed since that batch was sent, so that a steady stream of
// single-row commits is published in fuller rounds; a row committed longer
// than that after the last batch is read at once.
//
// Inside a transaction run by the consumer package, [Outbox.Enqueue] buffers
// the rows and the consumer writes them in one multi-row INSERT just before
// the commit (one statement for a whole batch of events).
//
// Every read returns the lowest ids still in the table, so a row whose
// transaction commits after rows with higher ids were published (ids are
// assigned at insert, visibility comes at commit) is simply published by a
// later batch instead of being skipped. A read starts past the leader's read
// floor: an id below which every row is published and no transaction can
// still commit one. The floor moves at most every [WithFloorInterval]
// (default 1 s), in two steps: it notes the id sequence's last value and the
// transactions then holding the table's RowExclusiveLock (an INSERT takes it
// before drawing an id and keeps it to the end of its transaction); once none
// of them holds it, every id up to that value is final, and the floor moves
// there, or to just below the lowest such id still waiting. Deleted rows
// leave index entries that only vacuum removes, and a long transaction
// anywhere on the server (a backup, an analytics query, a session left open)
// holds vacuum back: without the floor every read would walk all of them;
// with it a read walks those of about the last two intervals
// (`go run ./bench/outbox -held N` measures both). The floor needs the id
// column's own sequence drawing one value at a time (the schema's identity
// column) and a relay role that may read it (SELECT on the sequence);
// otherwise reads start at the first row, with a warning. Once a minute a read
// starts at the first row anyway, and logs a warning if it finds a row below
// the floor (an id drawn outside the column's default).
//
// # Ordering
//
// Per-key order holds end to end when the writes of one entity are
// serialised, which is what the consumer's per-entity lock and the entity's
// row lock give: a transaction writes the entity row first and enqueues
// afterwards (the design's rule), so a second transaction on the same entity
// blocks on the row lock until the first commits, and only then draws its
// outbox id. Per key, id order is therefore commit order, and any snapshot
// that sees the later row also sees the earlier one. Reading in id order,
// producing a batch in id order with an idempotent producer (which keeps
// order within a partition across retries) and never producing the next
// batch before the previous one is fully acknowledged preserve it. Rows of
// different keys may be published in any relative order, and a late commit
// may be published after rows with higher ids of other keys.
//
// # Failures
//
// Delivery is at least once. The client must be an idempotent producer with
// acks=all (franz-go's defaults; Run returns [ErrUnsafeClient] otherwise).
// Retryable broker errors are retried by franz-go; those it gives up on
// (with RecordRetries or RecordDeliveryTimeout set) are retried by the relay
// from the oldest row, with exponential backoff and full jitter ([WithRetryBackoff]),
// forever: a row is never dropped. A record the broker can never accept
// (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD,
// INVALID_TOPIC_EXCEPTION) is produced once more on its own — a broker
// rejects a whole batch for one oversized record, so its neighbours get their
// own chance — and, if it fails again, moved to the dead-letter table
// (<table>_dead) with the reason, in one statement; rows behind it carry on.
//
// A broker refuses a produce batch as a whole when it is larger than the topic's
// max.message.bytes, and franz-go builds batches up to the client's
// ProducerBatchMaxBytes. When that is the larger of the two, and franz-go splits one
// partition's rows of a round over several batches (it sends the first as soon as it
// can; later records form the next), a refused earlier batch does not stop the later
// ones: their rows would be written before the refused batch's rows, retried on their
// own, and per-key order would break for keys with rows in both. The relay prevents
// this at the source. The first time it meets a topic it asks the broker for the
// topic's max.message.bytes (DescribeConfigs through kadm on its own client, one
// request for all the round's new topics, at most 5 seconds; asked again every 5
// minutes and in the round after a size refusal). When the client's
// ProducerBatchMaxBytes for the topic (kgo.ProducerBatchMaxBytesFn, as the client
// reports it) exceeds that limit, a round carries no more of that topic's record bytes
// than one batch may hold: the longest prefix in id order, counted as franz-go encodes
// the records before compression (compression only shrinks a batch franz-go sends, as
// it falls back to the uncompressed form), with the widest offset and timestamp
// deltas, plus the traceparent header the producer span may add. The rest of the
// topic's rows stay in the table for the next round; other topics are not affected. No
// batch of the round can then exceed the limit, however franz-go splits it, so the
// broker never refuses one for size. Each held-back row is counted in
// [MetricDeferred]; the cap is logged once per topic (topic, reason,
// max_message_bytes, producer_batch_max_bytes), and so is a failed lookup (topic,
// reason describe_configs_failed, err). A row whose record cannot fit even alone is
// moved to the dead-letter table at once, without a produce attempt, when the client
// does not compress (kgo.ProducerBatchCompression(kgo.NoCompression())); with
// compression it may still fit, so it is produced alone among its topic's rows and a
// refusal dead-letters it as above. With a default client and broker (franz-go's
// 1,000,012 bytes, Kafka's 1,048,588) no topic is capped, and a round costs a string
// comparison per row (about 10 ns), plus one DescribeConfigs per topic every 5
// minutes. A capped topic moves at most its limit's worth of bytes per round (one
// round trip to the broker), for all of its partitions together, and each capped round
// reads the held-back rows again; to avoid that cost, give the client
// ProducerBatchMaxBytes (or kgo.ProducerBatchMaxBytesFn per topic) no larger than the
// topics' limits, which is also what makes franz-go refuse an oversized record alone
// before sending it.
//
// What remains. If the broker refuses DescribeConfigs (no DescribeConfigs ACL on the
// topic) or the call fails, the relay logs it once per topic, publishes that topic
// uncapped, and asks again after a minute; with a limit below the client's
// batch size, such a topic keeps the risk of a batch refused for its size. A limit lowered while the relay runs can
// refuse one round's batch before the relay reads the new value (the next round does).
// A topic whose compression.type names a codec other than the producer's makes the
// broker recompress, and a recompressed batch can in principle come out larger. The
// cap counts the relay's records only: records of the same partition produced
// through the same client by someone else at the same moment can share a batch with
// them. Finally, a broker may refuse a batch for a record's content rather than its
// size (INVALID_RECORD: a null key on a compacted topic, which the relay never sends,
// or a broker-side record validation): franz-go fails the whole batch and writes the
// partition's later batches, so per-key order can break around such a record exactly
// as it did around an oversized batch. No client-side cap prevents that; avoid
// broker-side validation on topics fed by an outbox, or give such a topic an outbox
// table of its own whose relay sends one row per round ([WithBatchSize](1)).
//
// A crash between the broker's acknowledgement and the delete republishes
// that batch (at most [WithBatchSize] rows). The leader's session runs with
// synchronous_commit=off, because a delete lost in a Postgres crash has the
// same effect, and it saves a WAL flush per batch; consumers dedupe by event id, as the
// idempotency package does. A deposed leader whose produce was stalled may
// likewise publish rows the new leader also publishes: duplicates, never a
// reordering of first deliveries.
//
// On cancellation Run finishes the batch in flight — waits up to
// [WithShutdownTimeout] for its acknowledgements and deletes the acknowledged
// rows — or abandons it, leaving its rows for the next leader. Either way at
// most that one batch is published twice.
//
// # Observability
//
// Every record gets a producer span ("send <topic>", messaging semantic
// conventions) whose parent is the trace context stored with the row; the
// produced record carries the producer span's context, so a consumer's span
// is its child. The span also carries saga.correlation_id (from the
// ce_correlationid header) and, with [WithEntityAttribute], the entity id.
// Metrics go through the OpenTelemetry metric API ([WithMeterProvider], default
// the global provider): backlog size, age of the oldest row, leadership,
// published total, publish latency (row insert → broker acknowledgement),
// produce errors and dead letters; see the Metric constants.
//
// # Operations
//
// The relay opens its two sessions from the pool's configuration with
// application_name "choreo-outbox-relay <table>" and "choreo-outbox-listen
// <table>", so they are easy to find in pg_stat_activity: one per relay on
// standby, two on the leader. Session advisory locks and LISTEN need a real
// session, so behind a transaction-mode pooler (PgBouncer's pool_mode =
// transaction) give the relay a direct (or session-mode) configuration with
// [WithSessionConfig]; everything else, the writers' NOTIFY included, works
// through the pooler, whose pool then needs a query mode without named prepared
// statements (pgx's default_query_exec_mode=cache_describe). Rows are deleted,
// not marked, so there is nothing to clean up; dead letters stay until an
// operator deals with them (re-enqueue with INSERT … SELECT topic, key,
// headers, payload FROM <table>_dead, or delete them).
//
// # Why not a library
//
// The Go outbox implementations we know are parts of messaging frameworks
// (Watermill's forwarder, for one, moves Watermill messages from an SQL
// subscriber to a publisher) and bring their own message model and offset
// bookkeeping. None combines pgx transactions, franz-go's idempotent
// producer, leader election without an extra service and the ordering
// argument above, so the relay is written here, on pgx and franz-go.
package outbox
