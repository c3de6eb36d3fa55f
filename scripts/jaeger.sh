#!/usr/bin/env bash
# make jaeger: builds Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, the version
# pinned in tools/jaeger/go.mod, a module of its own so that choreo's go.mod stays free of
# its dependencies) into bin/jaeger when missing or older than the pin, then runs it in the
# foreground with tools/jaeger/config.yaml: OTLP on 127.0.0.1:4317/4318, memory storage,
# query API on http://127.0.0.1:16686/api/. The first build downloads and compiles a large
# module (several minutes on 2 cores); later builds come from the Go build cache.
#   scripts/jaeger.sh build   only build
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x bin/jaeger ] || [ tools/jaeger/go.mod -nt bin/jaeger ] || [ tools/jaeger/go.sum -nt bin/jaeger ]; then
  echo "jaeger: building bin/jaeger from the module proxy (tools/jaeger/go.mod)" >&2
  mkdir -p bin
  (cd tools/jaeger && go build -o ../../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger)
fi
[ "${1:-run}" = build ] && exit 0
echo "jaeger: OTLP on 127.0.0.1:4317 (gRPC) and 127.0.0.1:4318 (HTTP), query API on http://127.0.0.1:16686/api/" >&2
exec bin/jaeger --config tools/jaeger/config.yaml
