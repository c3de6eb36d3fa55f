// Package rebalance measures, on one broker in one run, how long a consumer group stops
// consuming when an instance joins, leaves, or restarts, under each group protocol Kafka
// has: the classic protocol with the eager range balancer, with cooperative-sticky, with
// cooperative-sticky and static members (the kit's default), and KIP-848's broker-side
// protocol (franz-go's kgo.ServerSideBalancer), dynamic and static.
//
// BenchmarkGroupProtocols runs each protocol through the same script — two members consume a
// topic of 12 partitions written at 50 records/s per partition; a third joins; one
// leaves; one restarts under the same name — and checks that no partition is ever owned
// by two members at once and that every partition is consumed again after each change. It
// prints, per protocol and change, the longest time any partition went unconsumed (the
// stall a user sees) and the records delivered twice. Run it on Apache Kafka:
//
//	CHOREO_TEST_KAFKA=apache go test -run '^$' -bench GroupProtocols -benchtime 1x ./bench/rebalance
//
// (make group-protocols, which CI runs; about 4 minutes, mostly waiting on session
// time-outs). It is a benchmark so that make test, on kfake, leaves it out.
package rebalance
