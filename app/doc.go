// Package app is the service plumbing of a choreo service: everything between main()
// and the business handlers, so that a service's main stays a page long. It is used by
// the reference services and is meant for yours.
//
// # Configuration
//
// [Env] reads environment variables with defaults and collects every problem (a
// malformed number, a negative duration, a failed [Env.Check]) so that one start-up error
// lists them all; values of secret-looking variables (…_URL, …_PASSWORD, …) are never
// echoed. [LoadConfig] reads the variables every service shares:
//
//	DATABASE_URL        the service's own database (default postgres://postgres@127.0.0.1:5432/choreo_<service>)
//	DATABASE_SESSION_URL  the outbox relay's sessions, direct when DATABASE_URL is a transaction-mode pooler (default DATABASE_URL)
//	DATABASE_MAX_CONNS  Postgres pool size (default 4×KAFKA_PARTITIONS+4; pool_max_conns in the URL wins); idle connections close after 1m
//	DATABASE_MIN_CONNS  connections opened before New returns, closed once idle (default 0; pool_min_conns in the URL, kept while idle, wins)
//	REDIS_ADDR          Redis for per-entity locks (default 127.0.0.1:6379; "none" runs without locks)
//	REDIS_URL           Redis as redis://user:password@host:port/db or rediss:// (instead of REDIS_ADDR)
//	REDIS_TLS_CA_FILE   CAs of the Redis server's certificate, with rediss://
//	KAFKA_BROKERS       seed brokers, comma-separated (default 127.0.0.1:9092)
//	KAFKA_PARTITIONS    partitions of topics created at start (default 6)
//	KAFKA_SASL_*, KAFKA_TLS*  SASL and TLS of every Kafka client ([LoadKafkaSecurity])
//	HTTP_ADDR           the service's routes, /healthz and a /readyz without details
//	HTTP_ALLOWED_HOSTS  host names answered besides loopback names and IPs (default none: others get 421; * for any)
//	ADMIN_ADDR          /healthz, /readyz with details and /metrics (default loopback, HTTP port+1000)
//	ADMIN_TOKEN         bearer token /metrics and /debug/pprof/ require (default none; PPROF beyond loopback needs it)
//	LOG_LEVEL           debug, info, warn, error (default info)
//	SHUTDOWN_TIMEOUT    bound of the graceful shutdown (default 30s)
//	CONSUMER_BATCH      most waiting records of a partition per transaction (default 64; 1: off)
//	PPROF               1: serve net/http/pprof under /debug/pprof/ on the admin listener (default off)
//	OTEL_*              exporters and sampling, read by tracing.Setup
//
// # The App
//
// [New] connects a service: telemetry (tracing.Setup), a JSON slog logger whose records
// carry trace_id, span_id and correlation_id, the database (created if missing, then
// migrated with the idempotency, lock-fence and outbox schemas), Redis and a
// [lock.Locker], and the Kafka producer shared by the outbox relay and dead-lettering.
// The service then registers a handler per event type and version ([On]: one consumer
// group running the standard middleware chain; the handler publishes its next event
// with a [Producer] or [App.Publish] in its transaction, and that event continues the
// handled event's saga), the events it publishes ([App.Produces]), HTTP routes
// ([App.HandleHTTP]: a server span and a request deadline per request, and optionally
// admission control in front of both, [WithRouteAdmission]) and background functions
// ([App.Go]), and calls [App.Run].
// docs/embedding.md is the guide.
//
// Run serves /healthz (liveness: the process answers), /readyz (Postgres, Redis, Kafka,
// every consumer group's Health (a partition in an outage or stalled fails it) and any
// [App.AddCheck], each bounded by 2 s; 503 before
// start and during shutdown) and /metrics (Prometheus exposition of the OTel meter provider and the Go
// runtime). On SIGTERM, SIGINT or cancellation of its context it shuts down in an order
// that loses nothing:
//
//  1. /readyz turns 503; the HTTP server stops accepting and finishes in-flight requests
//     (which may still enqueue events);
//  2. consumers stop fetching, finish their in-flight handlers and commit their offsets;
//     background functions stop;
//  3. the outbox relay publishes what is left of its batch and steps down, so events
//     committed in steps 1–2 are published now or by the next leader;
//  4. Kafka, Redis and Postgres connections close;
//  5. buffered spans and metrics are flushed.
//
// A component that fails on its own (a consumer that cannot start, a background function
// returning an error) triggers the same shutdown, and Run returns its error wrapped in
// [ErrComponent].
//
// # Helpers without the App
//
// [MigrateSQL] and [EnsureTopics] work on their own, for services that keep their own
// main loop. Package apptest drives a service through Kafka in tests.
//
// # Why hand-written
//
// The pieces are libraries (otelhttp for server spans, client_golang through
// tracing.Telemetry.MetricsHandler for /metrics, kadm for topics, pgx and go-redis); what this
// package adds is their wiring and the shutdown order above, which is specific to
// choreo's outbox/consumer pair and which general-purpose lifecycle libraries (fx,
// oklog/run) would leave to each service to get right.
package app
