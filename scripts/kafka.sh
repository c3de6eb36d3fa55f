#!/usr/bin/env bash
# A real Apache Kafka on this machine, as plain Java processes in KRaft mode (no Docker).
#
#   scripts/kafka.sh fetch                 the broker's jars into the cache (Maven, checksums
#                                          verified); prints the jar directory
#   scripts/kafka.sh run [-n N] [-p PORT] [-d DIR] [-w]
#                                          formats and starts an N-node cluster (1 or 3;
#                                          every node is controller and broker), waits until
#                                          every broker is started and unfenced, prints one
#                                          JSON line {"Addr":"host:port,...","Dir":"..."},
#                                          then runs until SIGINT/SIGTERM, a node's exit,
#                                          or (-w) until its standard input closes; it then
#                                          stops every node and removes DIR
#   scripts/kafka.sh config [-n N] [-p PORT] [-d DIR] [-i NODE]
#                                          prints node NODE's server.properties (default 1)
#   scripts/kafka.sh log4j                 prints a node's log4j2 configuration
#   scripts/kafka.sh version               prints the Kafka version
#
# Node i (1..N) listens for clients on 127.0.0.1:PORT+2(i-1) and for the controller quorum
# on the port after it. PORT defaults to 9092; DIR to a new temporary directory. The jars
# live in $CHOREO_KAFKA_CACHE (default ~/.cache/choreo/kafka-$VERSION), fetched on first use.
# KAFKA_HEAP_OPTS and KAFKA_JVM_OPTS replace the JVM's heap and other options.
set -euo pipefail

KAFKA_VERSION=4.4.0
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
cache=${CHOREO_KAFKA_CACHE:-$HOME/.cache/choreo/kafka-$KAFKA_VERSION}
libs=$cache/libs

die() { echo "kafka.sh: $*" >&2; exit 1; }

# fetch copies the broker's runtime jars into $libs once; a lock serializes concurrent
# callers (test binaries run in parallel) and a marker records a complete download.
fetch() {
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -f "$libs/.complete" ]; then
    command -v mvn >/dev/null || die "needs Maven (mvn) and a JDK 17+ (apt-get install maven openjdk-17-jdk-headless)"
    echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION's jars with Maven into $libs" >&2
    rm -rf "$libs"
    mvn -B -q -Dstyle.color=never --strict-checksums -f "$root/tools/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs" >&2 ||
      die "Maven could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION"
    touch "$libs/.complete"
  fi
  exec 9>&-
}

nodes=1 port=9092 dir= made= watch= node=1
parse() {
  local OPTIND opt
  while getopts "n:p:d:i:w" opt; do
    case $opt in
      n) nodes=$OPTARG ;;
      p) port=$OPTARG ;;
      d) dir=$OPTARG ;;
      i) node=$OPTARG ;;
      w) watch=1 ;;
      *) die "unknown option" ;;
    esac
  done
  case $nodes in 1 | 3) ;; *) die "-n must be 1 or 3" ;; esac
}

client_port() { echo $((port + 2 * ($1 - 1))); }
controller_port() { echo $((port + 2 * ($1 - 1) + 1)); }

# config prints node $1's server.properties. The settings after "# Shared" are the ones
# docker-compose.yml's broker must also have (deploy/compose_test.go checks it).
config() {
  local i=$1 voters= j
  for j in $(seq 1 "$nodes"); do voters+="${voters:+,}$j@127.0.0.1:$(controller_port "$j")"; done
  local rf=$nodes isr=$((nodes > 1 ? 2 : 1))
  cat <<EOF
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(client_port "$i"),CONTROLLER://127.0.0.1:$(controller_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")
log.dirs=$dir/node-$i/data
# Shared
process.roles=broker,controller
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
group.initial.rebalance.delay.ms=0
num.partitions=6
auto.create.topics.enable=false
EOF
}

log4j() {
  cat <<EOF
appender.file.type=File
appender.file.name=file
appender.file.fileName=\${sys:kafka.logs.dir}/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
logger.kafka.name=org.apache.kafka
logger.kafka.level=WARN
logger.state.name=state.change.logger
logger.state.level=WARN
EOF
}

# stop_all sends SIGTERM to every process started (each broker shuts down cleanly), and
# SIGKILL to those still running 30 s later.
pids=()
stop_all() {
  local p guard
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null || true
  (
    trap 'kill "$timer" 2>/dev/null; exit 0' TERM
    sleep 30 &
    timer=$!
    wait "$timer" && kill -9 "${pids[@]}" 2>/dev/null
  ) &
  guard=$!
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  kill "$guard" 2>/dev/null || true
  pids=()
}

run() {
  exec 3<&0 # background jobs get /dev/null as standard input
  fetch
  command -v java >/dev/null || die "needs a JDK 17+ (apt-get install openjdk-17-jdk-headless)"
  if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/choreo-kafka.XXXXXX")
    made=1
  fi
  cleanup() {
    trap - EXIT INT TERM
    stop_all
    # times' second line: the CPU time of the nodes and formats, all waited for by now.
    times >"$dir/times"
    echo "kafka.sh: stopped; CPU time of the nodes (user, system): $(sed -n 2p "$dir/times")" >&2
    if [ -n "$made" ]; then rm -rf "$dir"; fi
  }
  trap cleanup EXIT
  trap 'exit 0' INT TERM

  local heap=${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}
  local jvm=${KAFKA_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true}
  local id i addrs=
  id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c 1-22)
  for i in $(seq 1 "$nodes"); do
    mkdir -p "$dir/node-$i"
    config "$i" >"$dir/node-$i/server.properties"
    log4j >"$dir/node-$i/log4j2.properties"
    addrs+="${addrs:+,}127.0.0.1:$(client_port "$i")"
  done
  # StorageTool writes each node's meta.properties and the cluster's bootstrap metadata;
  # the nodes are formatted in parallel.
  local formats=()
  for i in $(seq 1 "$nodes"); do
    java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$libs/*" -Dlog4j2.configurationFile="$dir/node-$i/log4j2.properties" \
      -Dkafka.logs.dir="$dir/node-$i" kafka.tools.StorageTool format --cluster-id="$id" \
      --config "$dir/node-$i/server.properties" --ignore-formatted >"$dir/node-$i/format.log" 2>&1 &
    formats+=($!)
  done
  for i in $(seq 1 "$nodes"); do
    wait "${formats[$((i - 1))]}" || die "format node $i: $(cat "$dir/node-$i/format.log")"
  done
  for i in $(seq 1 "$nodes"); do
    # shellcheck disable=SC2086 # the options are word lists
    java $heap $jvm -cp "$libs/*" -Dlog4j2.configurationFile="$dir/node-$i/log4j2.properties" \
      -Dkafka.logs.dir="$dir/node-$i" kafka.Kafka "$dir/node-$i/server.properties" \
      >"$dir/node-$i/stdout.log" 2>&1 &
    pids+=($!)
    echo "$!" >"$dir/node-$i/pid"
  done
  # Ready: every node logged that its broker started, which it does once it is unfenced.
  local started
  while :; do
    started=0
    for i in $(seq 1 "$nodes"); do
      kill -0 "${pids[$((i - 1))]}" 2>/dev/null ||
        die "node $i exited while starting: $(tail -n 20 "$dir/node-$i/server.log" "$dir/node-$i/stdout.log" 2>/dev/null)"
      grep -q 'Kafka Server started' "$dir/node-$i/server.log" 2>/dev/null && started=$((started + 1))
    done
    [ "$started" = "$nodes" ] && break
    sleep 0.2
  done
  printf '{"Addr":"%s","Dir":"%s"}\n' "$addrs" "$dir"
  if [ -n "$watch" ]; then
    # Standard input closes when the process that started us exits, however it exits.
    cat <&3 >/dev/null &
    pids+=($!)
  fi
  echo "kafka.sh: Apache Kafka $KAFKA_VERSION, $nodes node(s), brokers $addrs, data in $dir" >&2
  wait -n "${pids[@]}" || true
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  fetch) fetch && echo "$libs" ;;
  run) parse "$@" && run ;;
  config) parse "$@" && dir=${dir:-/tmp/choreo-kafka} && config "$node" ;;
  log4j) log4j ;;
  version) echo "$KAFKA_VERSION" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
