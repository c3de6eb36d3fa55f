// Package e2e holds the end-to-end test of choreo's reference saga: the order, payment and
// inventory services run in one process (ordersvc.Run, paymentsvc.Run, inventorysvc.Run)
// against real Postgres (one database per service), Redis and an in-process Kafka broker
// (kfake), and 300 orders placed over HTTP must reach their expected end states with
// money and stock conserved, also when every event is delivered twice.
//
// Run it with
//
//	go test -count=1 ./services/e2e/
package e2e
