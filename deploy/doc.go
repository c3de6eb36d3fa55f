// Package deploy holds what the container deployment of the reference system needs
// besides ../docker-compose.yml and ../Dockerfile, and the tests that keep them in step
// with the code:
//
//	postgres/init-databases.sh   one role and one database (choreo_<service>) per service,
//	                             run by the postgres image on first start
//	kafka/create-topics.sh       the saga's topics and their .dlq topics, run by the
//	                             kafka-init service once the broker is healthy
//	healthcheck/                 a static HTTP probe for the distroless service images
//
// The tests need no container engine. They parse docker-compose.yml and check that every
// service, port, dependency and environment variable the binaries need is there, by
// loading each service's configuration (paymentsvc.LoadConfig and friends) from the
// compose environment: a misspelt or unknown variable, or a value the service would
// reject, fails the test. They also run init-databases.sh against the test Postgres and
// build the three service binaries the way the Dockerfile does (CGO_ENABLED=0).
//
// The compose file itself is validated by Docker Compose:
//
//	apt-get install -y docker-compose   # Debian's package, no engine needed
//	docker-compose -f docker-compose.yml config -q
package deploy
