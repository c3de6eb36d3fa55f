package app

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
)

// check reports whether one dependency is usable; nil means healthy.
type check func(ctx context.Context) error

// namedCheck is a check with the name it is reported under by readyHandler.
type namedCheck struct {
	Name  string
	Check check
}

// postgresCheck pings pool.
func postgresCheck(pool *pgxpool.Pool) check {
	return func(ctx context.Context) error { return pool.Ping(ctx) }
}

// redisCheck pings rdb.
func redisCheck(rdb redis.UniversalClient) check {
	return func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
}

// kafkaCheck asks a broker of cl for cluster metadata (kgo.Client.Ping).
func kafkaCheck(cl *kgo.Client) check {
	return func(ctx context.Context) error { return cl.Ping(ctx) }
}

// consumerCheck reports c's Health: it fails while a partition of c is in an outage (a
// dependency of its handler chain is unavailable; the consumer resumes by itself) or
// stalled (lag and no progress for the stall timeout), naming the partitions.
func consumerCheck(c *consumer.Consumer) check {
	return func(context.Context) error { return c.Health() }
}

type readyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readyHandler returns a /readyz handler: it runs every check concurrently, each bounded
// by timeout, and answers 200 {"status":"ok","checks":{"postgres":"ok",...}} when all pass
// and 503 with "status":"unavailable" and each failing check's error otherwise. gate, if
// not nil, is consulted first: a non-nil error (e.g. [ErrNotReady] during shutdown) makes
// the answer 503 without running the checks.
func readyHandler(timeout time.Duration, gate func() error, checks ...namedCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := readyResponse{Status: "ok", Checks: make(map[string]string, len(checks))}
		if gate != nil {
			if err := gate(); err != nil {
				resp.Status = "unavailable"
				resp.Checks["service"] = err.Error()
				writeJSON(w, http.StatusServiceUnavailable, resp)
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for _, c := range checks {
			wg.Go(func() {
				msg := "ok"
				if err := c.Check(ctx); err != nil {
					msg = err.Error()
				}
				mu.Lock()
				resp.Checks[c.Name] = msg
				if msg != "ok" {
					resp.Status = "unavailable"
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		code := http.StatusOK
		if resp.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, resp)
	})
}

// healthHandler returns a /healthz (liveness) handler: 200 {"status":"ok"} as long as the
// process serves HTTP. It checks no dependency, so an outage of Postgres or Kafka makes
// the service unready, never restarted.
func healthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
