// Package apptest helps test a choreo service end to end through Kafka: produce events
// (optionally every record twice, to simulate at-least-once delivery at its worst), wait
// until a consumer group has caught up and the outbox is drained, and read back what the
// service published, decoded by entity.
//
// It talks to real brokers (a kfake cluster is fine) and a real Postgres; it mocks nothing.
// Waits poll a condition until a generous deadline, so tests never depend on how fast the
// machine is.
package apptest
