// Command devkafka runs a standalone Kafka-protocol broker for local development, built on
// franz-go's kfake. It is what `make demo` starts instead of a real Kafka: one broker on
// 127.0.0.1, topics persisted to a data directory so a restart keeps records, committed
// consumer-group offsets and producer state.
//
// Usage:
//
//	devkafka [flags]
//
// Flags:
//
//	-port N          listen port on 127.0.0.1 (default 9092; 0 picks a free port)
//	-advertise H:P   the broker address given to clients in metadata (default: the
//	                 address listened on); point it at a proxy in front of the broker
//	                 (e.g. internal/testenv/faultproxy) and every connection of a client
//	                 bootstrapped through the proxy goes through it, not only the first
//	-data-dir DIR    persistence directory (default ~/.cache/choreo-devkafka, i.e.
//	                 filepath.Join(os.UserCacheDir(), "choreo-devkafka"), or under the
//	                 temporary directory without a home); made mode 0700, refused if
//	                 another user owns it; an empty value keeps everything in memory
//	                 and loses it on exit
//	-partitions N    partitions of seeded and auto-created topics (default 6, like the
//	                 services' KAFKA_PARTITIONS default)
//	-topics a,b,c    topics to create at start if they do not exist yet (default none)
//	-auto-create     let clients create topics by producing to or asking metadata for
//	                 them (default true; -auto-create=false to turn off)
//	-sync            fsync every produced batch (default false: the OS page cache holds
//	                 writes, which survive a process crash but not a machine crash,
//	                 like Kafka's default flush policy)
//	-log-level L     broker-internal log level: none, error, warn, info, debug (default
//	                 warn)
//	-member-grace D  remove a consumer-group member D after every connection it used
//	                 closed (default 3s); a static member (group.instance.id) is kept
//	                 for at least its session timeout so that a restart with the same
//	                 instance id takes its partitions back without a rebalance
//	-sasl M:U        require SASL and accept user U over mechanism M (PLAIN,
//	                 SCRAM-SHA-256, SCRAM-SHA-512); repeatable (security.go). A value
//	                 with a password (M:U:P) is refused: a command line shows in ps
//	-sasl-password-file F  the -sasl users' passwords, one user:password line each
//	                 (# comments and blank lines skipped); refused if other users can
//	                 read F. A user F does not name takes $DEVKAFKA_SASL_PASSWORD.
//	                 After a failed attempt, an address's next SASL attempts wait their
//	                 turn: 100 ms after the first failure, doubling up to 5 s, across all
//	                 of its connections; one more than 20 s away is refused
//	                 (devbroker.WithSASLDelay)
//	-tls-cert F, -tls-key F  serve TLS only, with this PEM certificate and key
//	-tls-client-ca F require client certificates signed by these CAs (mutual TLS)
//
// devkafka logs (log/slog text on stderr) the address it listens on, the data directory
// and whether existing state was loaded. On SIGINT or SIGTERM it stops accepting
// connections, writes its state to the data directory and exits 0; a second signal during
// that forces exit 1. Seeded topics are created after start, also when state was loaded
// from disk, and topics that already exist are left alone.
//
// Crash safety: records acknowledged on topics created with -topics or a CreateTopics
// request (kadm, kafka-topics.sh, the choreo services at start) survive a killed process.
// A topic auto-created by a metadata request is written to the data directory only at the
// next topic change or clean shutdown (kfake's behaviour), so after a crash it and its
// records are gone; create topics explicitly when that matters.
//
// Consumer groups survive kill -9: kfake alone keeps a member that died while its
// JoinGroup waited in a rebalance with no session timer, which wedges the group (see
// docs/reliability.md). devkafka watches which connections speak for which group member
// (internal/devbroker) and, when all of a member's connections have closed, sends the
// broker a LeaveGroup for it and logs a warning naming the group and member. A member
// that is slow or paused keeps its connections and is left alone.
//
// Point any Kafka client at it, for example:
//
//	go run ./cmd/devkafka -topics orders.events,payments.events,inventory.events
//	kcat -b 127.0.0.1:9092 -L
//	KAFKA_BROKERS=127.0.0.1:9092 go run ./services/order
//
// Files: devkafka runs with umask 077, so everything it writes in its data directory
// (segments, offsets, and sasl.json with the SASL users' credentials) is mode 0600.
//
// The broker listens on the loopback interface only and advertises 127.0.0.1:<port>
// unless -advertise says otherwise, so clients in containers cannot reach it; use
// docker-compose.yml for a containerised stack.
//
// Exit codes: 0 after a clean shutdown, 1 if the broker could not start or persist, 2 for
// bad flags.
package main
