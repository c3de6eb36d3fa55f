// Package chaos is choreo's chaos suite: it runs the reference system as separate
// processes, injects faults while orders flow, and checks the saga's invariants from the
// databases and topics after the system quiesces, never from logs.
//
// Each scenario starts a fresh [System]: the binaries built once (go build into a
// temporary directory), cmd/devkafka on a free port with its own data dir and every topic
// created at start, a Redis of its own (redis-server --save "" --appendonly no, so it can
// be stopped and restarted empty without touching the shared one), the shared Postgres
// with databases of the run's own (chaos_<id>_<service>, dropped at the end), and two
// instances of each service (order, payment, inventory) as processes with distinct HTTP
// ports and instance ids. An HTTP balancer in front of the order instances lets
// `sagactl load` keep placing orders while instances die. Every process is in its own
// process group with a parent-death signal, and [System.Close] stops them all, also when
// a run fails or is interrupted. The broker-* scenarios run on an Apache Kafka cluster
// of three nodes instead of devkafka (Options.ApacheNodes): scripts/kafka.sh provides the
// jars and each node's configuration, the harness formats the nodes and runs each one as a
// process of its own, and creates every topic with replication factor 3 and
// min.insync.replicas 2 (the services produce with acks=all).
//
// The faults are Go functions of a scenario run: kill -9 of a random instance or of the
// outbox relay leader (the instance whose Postgres session holds the relay's advisory
// lock, found through pg_locks and the session's client port), a Postgres outage of one
// service's database (ALLOW_CONNECTIONS false and pg_terminate_backend of its sessions),
// Redis stopped and started empty, devkafka killed and restarted on its data dir, the
// Apache Kafka broker that leads the most saga-topic partitions killed with -9 or paused
// past its session time-out, a rolling restart of the three brokers (each waited for
// until it is back in the ISR of its partitions before the next), every
// event delivered twice and whole topics replayed from offset 0, poison records produced
// with a plain franz-go client, a lock holder paused (SIGSTOP) past the lock TTL,
// network faults through internal/testenv/faultproxy (latency with jitter, hung connections,
// resets, a bandwidth cap, partitions) between the payment instances and their Postgres
// and Redis, or between every client and devkafka (which then advertises the proxy's
// address, so that no connection bypasses it), and overload at twice the measured
// saturation, and a rolling upgrade from the previous release (V1Release, built from the
// git history by BuildRelease) to this tree, one instance at a time, across a payload's
// schema version. [Scenarios] lists the scenarios of
// `make chaos`; cmd/chaos runs them. [Extra] lists those it runs only by name: the
// partitions scenario (`make chaos-partitions`) starts two systems of four instances per
// service, with 8 and with 64 partitions per topic, compares their confirmed orders per
// second at half the saturation, and on the second one times how long a killed member's
// group takes until every partition is consumed again and makes a rolling restart of
// every instance; each figure is printed beside its limit (Result.Figures).
//
// The invariants (see the Inv constants): every order terminal within a bound after the
// last fault, and none COMPENSATION_FAILED; at most one charge per order, refunds only for
// charged orders that were not confirmed, every charge confirmed or refunded (counted by
// order from the payment ledger), money conserved; stock conserved and held exactly by
// confirmed orders; no non-poison record in any dead-letter topic, and every poison record
// in a dead-letter topic or a dead-letter table with its reason; outboxes drained; each
// order's history a path of the order service's transition table
// (ordersvc.Lookup); in the overload and partitions scenarios, no order cancelled by its
// saga deadline.
package chaos
