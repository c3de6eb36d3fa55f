// Package securee2e holds the end-to-end test of a secured deployment of the reference
// saga: the three services, devkafka and sagactl run as processes (built from this
// module) against a devkafka that requires SASL/SCRAM-SHA-256 over TLS (with a CA
// generated for the test), a redis-server started with --requirepass and the shared
// Postgres, each service configured only from the documented environment variables.
// It proves that an order saga completes, that a wrong Kafka or Redis password is
// refused at start with a clear error, that no secret appears in any log, output or
// error, that forged events (wrong source, wrong topic) are dead-lettered as untrusted and
// change nothing, and that slow and oversized HTTP requests are cut off.
//
// Run it with
//
//	go test -count=1 -timeout 5m ./services/securee2e/
package securee2e
