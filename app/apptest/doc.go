// Package apptest helps test a choreo service end to end through Kafka: start it in
// process on fresh infrastructure (StartApp on a NewInfra, or Start for any run
// function), produce events (optionally every record twice, to simulate at-least-once
// delivery at its worst), wait until a consumer group has caught up and the outbox is
// drained, and read back what the service published, decoded by entity.
//
// For handler tests without Kafka it runs a handler in a transaction that claims its
// event id as the kit's handlers do (Handle, HandleConcurrently: an event handled twice
// runs its handler once) on a migrated database (NewDB) and reads what the handler left
// in the outbox (OutboxEvents). Smaller helpers check a service's configuration parsing
// (CheckParse, WantConfigError), its /metrics and its JSON logs (LogBuffer).
//
// It talks to real brokers (a kfake cluster is fine), a real Postgres and a real Redis
// (NewInfra and NewDB take them from internal/testenv); it mocks nothing. Waits poll a
// condition until a generous deadline, so tests never depend on how fast the machine is.
package apptest
