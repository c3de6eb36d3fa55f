# One image per choreo service, built from this file with the SERVICE build arg:
#
#   docker build --build-arg SERVICE=order -t choreo/order .
#
# docker-compose.yml builds order, payment and inventory this way. The binary is static
# (CGO_ENABLED=0) and runs as a non-root user on distroless/static, which has no shell;
# /healthcheck (deploy/healthcheck) is the probe the compose healthchecks run.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so editing code does not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG SERVICE
RUN case "${SERVICE}" in \
      order|payment|inventory) ;; \
      *) echo "build arg SERVICE must be order, payment or inventory (got '${SERVICE}')" >&2; exit 1 ;; \
    esac
ENV CGO_ENABLED=0 GOOS=linux
RUN go build -trimpath -ldflags="-s -w" -o /out/service ./services/${SERVICE} \
 && go build -trimpath -ldflags="-s -w" -o /out/healthcheck ./deploy/healthcheck

FROM gcr.io/distroless/static-debian12:nonroot
ARG SERVICE
LABEL org.opencontainers.image.title="choreo-${SERVICE}" \
      org.opencontainers.image.source="https://github.com/choreo-saga/choreo"
COPY --from=build /out/service /service
COPY --from=build /out/healthcheck /healthcheck
USER nonroot:nonroot
ENTRYPOINT ["/service"]
