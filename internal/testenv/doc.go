// Package testenv gives tests real Postgres, Redis and Kafka-protocol brokers, each test its
// own isolated slice of them. It and the packages under it are the repository's test
// infrastructure: faultproxy (a TCP proxy that injects network faults) and pgcluster (a
// private Postgres cluster with settings of its own). No library code imports them.
//
// Every service is resolved once per test binary, in this order:
//
//  1. an explicit environment variable: CHOREO_TEST_POSTGRES_DSN, CHOREO_TEST_REDIS_ADDR,
//     CHOREO_TEST_KAFKA_BROKERS (comma-separated);
//  2. the local default port (Postgres 127.0.0.1:5432 as user postgres, Redis 127.0.0.1:6379);
//  3. for Kafka only, with CHOREO_TEST_KAFKA=apache (or apache:3): an Apache Kafka
//     cluster of one (or three) nodes started by the test binary with scripts/kafka.sh,
//     stopped when the binary exits (CHOREO_TEST_KAFKA=kfake, or unset, skips this step);
//  4. a testcontainers-go container, when a Docker engine answers (started by the separate
//     module in ./containers through `go run`, so that choreo's module graph, and every
//     module importing the library, carries no Docker dependency);
//  5. for Kafka only: an in-process kfake cluster per test.
//
// Isolation: Postgres gives each test a fresh database (dropped at cleanup), Redis a unique
// key namespace (its keys deleted at cleanup), Kafka unique topic names (and, with kfake, a
// cluster of its own); EmptyKafka gives tests of code with fixed topic names a broker with
// no topics or groups. When Postgres or Redis cannot be found at all the test fails with one
// message naming the service and how to start it; nothing is skipped.
package testenv
