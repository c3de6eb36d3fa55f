// Package e2e holds the end-to-end test of choreo's reference saga: the order, payment and
// inventory services run in one process (ordersvc.Run, paymentsvc.Run, inventorysvc.Run)
// against real Postgres (one database per service), Redis and a Kafka broker emptied for
// each test (testenv.EmptyKafka), and 300 orders placed over HTTP must reach their expected
// end states with money and stock conserved, also when every event is delivered twice.
//
// make test runs it on Apache Kafka (one node, started by the test binary):
//
//	CHOREO_TEST_KAFKA=apache go test -count=1 ./services/e2e/
//
// and without CHOREO_TEST_KAFKA it runs on an in-process kfake broker per test.
package e2e
