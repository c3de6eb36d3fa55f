// Command sagactl is the operator's CLI for choreo's demo saga: where is an order and why
// is it stuck, what is in the dead-letter topics, and a load generator.
//
// Usage:
//
//	sagactl order <id>                   state, transition timeline, trace id, Jaeger URL
//	sagactl order retry-compensation <id>
//	                                     re-send the cancellation of a CANCELLING or
//	                                     COMPENSATION_FAILED order (the API answers 409, exit 1,
//	                                     in any other state)
//	sagactl stuck [-older-than 5m]       stuck orders, oldest first, with age and trace link
//	sagactl dlq list [topic]             dead-letter topics, or one topic's dead letters and reasons
//	sagactl dlq show <topic> <p:o>       one dead-lettered record in full
//	sagactl dlq replay <topic> <p:o>...  produce checked dead letters to the failed group's retry topic
//	sagactl dlq replay <topic> -all [-reason R] [-group G] [-source] [-dry-run]
//	sagactl load -n 200 -rate 50 [-mix success=70,decline=10,oos=10,cancel=10,stuck=1]
//	sagactl console [-addr 127.0.0.1:8090] [-metrics order=URL,...]
//	                                     the operations console in the browser (docs/console.md)
//	sagactl migrate [-database-url URL]  apply the library's table migrations (package
//	                                     migrate), print the recorded versions; -sql prints
//	                                     the SQL instead
//	sagactl track -db URL -config a.json[,b.json]
//	                                     index any declared saga's events with a consumer group
//	                                     of its own (package tracker, docs/tracker.md)
//	sagactl track stuck|list [-status S]|saga <correlation-id>
//	                                     query that index: stuck sagas and whom they wait
//	                                     for, sagas by status, one saga's timeline
//	sagactl flow [-last 1h] [-svg file] [-asyncapi file]
//	                                     the observed flow from that index: which event types
//	                                     followed which, produced by whom, how often and how
//	                                     soon; as SVG; as an AsyncAPI 3.0.0 document
//	sagactl contracts [-catalogue file] [-o file] [-asyncapi file] [-markdown file]
//	                                     the declared contracts (package contract): per service
//	                                     the events it produces and consumes with their payload
//	                                     schemas, as a catalogue (JSON, the baseline's form), as
//	                                     an AsyncAPI 3.0.0 document and as Markdown (docs/events.md)
//	sagactl contracts check -baseline file [-catalogue file] [-format table|json|github]
//	                                     compare them with a committed baseline, judged against
//	                                     what consumers declare they read; exit 1 on a breaking
//	                                     change (docs/contracts.md)
//	sagactl contracts usage [-window 24h] [-catalogue file] [-retire type@version]
//	                                     from that index: per event type and schema version,
//	                                     the producers seen, first and last seen, events in the
//	                                     window, dead letters, the consumers of the catalogue
//	                                     that still handle or accept it, and whether it can be
//	                                     retired (docs/contracts.md)
//
// order, stuck and load talk to the order service's HTTP API at -order-url (environment
// ORDER_URL, default http://127.0.0.1:8080). dlq reads and writes Kafka directly at
// -brokers (environment KAFKA_BROKERS, default 127.0.0.1:9092). migrate works on the
// database at -database-url (environment DATABASE_URL). Every command prints
// human-readable tables by default and JSON with -json; flags may come before or after
// the positional arguments, and these connection flags also before the command's name
// ("sagactl --order-url http://127.0.0.1:18080 load -n 200").
//
// Security: -order-token (environment ORDER_API_TOKEN) is sent as a bearer token to an
// order API that requires one. Kafka SASL and TLS come from the variables the services
// read (KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD, KAFKA_TLS,
// KAFKA_TLS_CA_FILE, KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE, KAFKA_TLS_SERVER_NAME) or
// the matching -kafka-sasl-* and -kafka-tls* flags. Everything sagactl prints has its
// control characters escaped (as \u001b), since reasons, keys and payloads come from outside.
//
// # Console
//
// console serves a server-rendered web app (html/template, embedded assets in consoleui/,
// a little vanilla JavaScript) on -addr (environment CONSOLE_ADDR, default loopback
// 127.0.0.1:8090): an overview of orders by state, stuck orders, dead letters per topic and
// reason, consumer lag per group and partition and the outbox backlog per service (scraped
// from the -metrics endpoints, environment CONSOLE_METRICS), refreshed from
// /api/overview; an order's page with its timeline as an SVG swimlane, its trace link and
// a cancel button; the dead letters with filters, each record's headers and payload, and
// replay with a dry run and a confirmation step through the same code as dlq replay
// (dlqread.go). With -tracker-db it also reads the saga tracker's index: sagas by kind and
// status, one page per correlation id, and the observed flow (/flow/, an inline SVG, with
// the SVG and an AsyncAPI 3.0.0 document to download). It keeps no state; every POST
// carries a CSRF token (an HMAC of a cookie under a per-process secret), and every answer
// a Content-Security-Policy.
//
// # Exit codes
//
//	0  success
//	1  failure: a contracts check that finds a breaking change, an order or record not
//	   found, a replay refused or failed, a load run with orders that could not be placed
//	   or did not settle within -wait, a retry-compensation of an order that is not
//	   CANCELLING or COMPENSATION_FAILED
//	2  usage error: unknown command, bad flag or argument (an unknown -reason too)
//	3  unreachable: the order service, the Kafka broker or Postgres did not answer
//
// # Dead-letter topics
//
// The consumer package's DeadLetter middleware writes a record that a consumer group gave
// up on to "<topic>.dlq" with the original key, value and headers plus choreo_dlq_*
// headers: reason (consumer.Reasons: malformed, unknown_type, untrusted, key_reused,
// panic, retries_exhausted, permanent, failed, upcast_failed, unsupported_version), error text, attempts, origin
// topic/partition/offset, group and the time it failed. `dlq list` decodes these; an
// unknown -reason is a usage error listing the valid ones. Positions are printed as partition:offset and
// accepted in the same form by `dlq show` and `dlq replay`. A topic may be named by its
// source ("orders.events") or in full ("orders.events.dlq").
//
// A record whose whole copy the dead-letter topic refused (too large) arrives as a bounded
// copy: choreo_dlq_truncated is "true", the value is cut, and choreo_dlq_original_size,
// choreo_dlq_sha256, choreo_dlq_archive_table and choreo_dlq_archive_id say where the full
// original is (a table in the consuming service's database). `dlq list` marks it
// "(truncated)", `dlq show` prints where the original is, and `dlq replay` refuses it
// (-all skips it): replay the original from the archive (docs/operations.md).
//
// A dead letter is one source record (topic, partition, offset) one group gave up on. A
// consumer killed after its dead-letter copy was acknowledged and before its offset was
// committed writes a second copy after the restart (same origin, group, key, value and
// headers); `dlq list`, `dlq replay`, the console's list and counts show and replay
// such copies once (COPIES, "duplicates" in -json, and `dlq show` names the others).
//
// `dlq replay` republishes only what it can prove: each record must name its origin and
// group, the origin must be the dead-letter topic's source topic or that group's retry
// topic, and the record at the origin must still be there with the same key, value and
// headers (the choreo_dlq_* ones aside). What it produces is that origin record, read
// back, so a record an attacker wrote into a .dlq topic cannot be laundered onto another
// topic. It goes to the retry topic of the group that dead-lettered it,
// "<topic>.retry.<group>" (consumer.RetryTopic), which only that group consumes
// (consumer.WithRetryTopics; every app.App consumer does), so the other groups of the
// topic never see it again; -source republishes to the source topic, which every group
// reads. The destination is never given by hand. Every check (each record, the
// destinations' existence, positions, -reason) runs before the first record is produced;
// a refusal of a named record names every refused record and produces nothing (exit 1).
// -all leaves out each record that fails a check, replays the others, names the refused
// ones on stderr (and under "refused" with -json) and exits 1. -all skips, with a
// line each, truncated copies and records whose origin is no longer in its topic
// (retention); named, they are refused.
//
// The key is kept, so the record lands on a partition by its key and per-entity order
// holds from then on. Replay is idempotent: the record carries the same event id (ce_id),
// and every consumer group claims an idempotency record (scope "<group>/<handler>", key =
// event id) in the transaction that handles an event, so a group that already handled the
// event skips it (with -source, every group but the failed one); replaying the same record
// twice is harmless for the same reason. This holds while the idempotency records are kept
// (idempotency.Store's retention, 7 days by default). The dead-letter topic is
// append-only and is not changed by a replay; use -dry-run to see what would be sent.
//
// # Load generator
//
// `sagactl load` places -n orders at -rate per second (each with an Idempotency-Key, so a
// retried request cannot create a second order), cancels the "cancel" ones right after
// placing them, waits until every order reaches a terminal state, except the orders of the
// "stuck" kind, which the payment service leaves hanging (PAYMENT_HANG_CUSTOMERS=c-hang, the default),
// and, with -wait-stuck (the default), until the order service flags those as stuck (a
// PENDING order after 30 s by default; bounded by -wait), and prints a table: orders per outcome with saga latency p50/p95/p99 (created_at to the
// final transition by the order service's clock, so polling delay is not counted), orders
// that ended other than their kind aims for, and the stuck orders with state, age, trace
// id and the `sagactl order <id>` command to inspect them. A progress bar is drawn on a
// terminal (stderr), plain progress lines otherwise. In -mix, success, decline, oos and
// cancel are relative weights apportioned by largest remainder, while stuck is an absolute
// number of orders: the default mix with -n 200 gives 139 success, 20 decline, 20 oos,
// 20 cancel and exactly 1 stuck order.
//
// load learns settlement from the order service's events on -brokers (orders.events,
// read from the end offsets it sees at start), not by asking for each order: a -poll tick
// makes at most two list queries (orders in COMPENSATION_FAILED, which no event
// announces, and the stuck flags), whatever the backlog, so a run does not load the system
// it measures. Only the orders still unsettled at the end are fetched, once each.
//
// The demo data it assumes (flags change it): customers c-1..c-100 with large limits,
// c-poor whose payments are declined, c-hang whose payments hang, stocked SKUs
// sku-1..sku-5 and sku-rare without stock.
package main
