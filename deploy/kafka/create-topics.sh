#!/bin/bash
# Creates the saga's topics and their dead-letter topics on the compose stack's Kafka,
# run once by the kafka-init service after the broker is healthy. Idempotent.
#
#   KAFKA_BOOTSTRAP   broker to talk to (default kafka:29092)
#   KAFKA_PARTITIONS  partitions per topic (default 6, app.DefaultKafkaPartitions)
#   CHOREO_TOPICS     topics, space-separated (default: services/events.Topics);
#                     each also gets <topic>.dlq
set -euo pipefail

bootstrap="${KAFKA_BOOTSTRAP:-kafka:29092}"
partitions="${KAFKA_PARTITIONS:-6}"
topics="${CHOREO_TOPICS:-orders.events payments.events inventory.events}"
bin=/opt/kafka/bin

for t in $topics; do
  for name in "$t" "$t.dlq"; do
    "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --create --if-not-exists \
      --topic "$name" --partitions "$partitions" --replication-factor 1
  done
done
"$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --list
