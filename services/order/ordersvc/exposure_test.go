package ordersvc_test

import (
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// TestRunWarnsOfAnOpenAPIBeyondLoopback: an HTTP_ADDR beyond loopback without
// ORDER_API_TOKEN logs one warning at start naming the token; with the token, or on
// loopback, there is none.
func TestRunWarnsOfAnOpenAPIBeyondLoopback(t *testing.T) {
	const warning = "the API listens beyond loopback without a token"
	brokers := testenv.Kafka(t)
	for _, tc := range []struct {
		name  string
		env   map[string]string
		warns int
	}{
		{"every interface, no token", map[string]string{"HTTP_ADDR": "0.0.0.0:8080"}, 1},
		{"every interface, token", map[string]string{"HTTP_ADDR": "0.0.0.0:8080", ordersvc.EnvAPIToken: "s3cret"}, 0},
		{"loopback, no token", map[string]string{"HTTP_ADDR": "127.0.0.1:8080"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ns := testenv.Redis(t)
			vars := map[string]string{
				"DATABASE_URL": testenv.PostgresDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
				"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "2",
			}
			for k, v := range tc.env {
				vars[k] = v
			}
			env := app.MapEnv(vars)
			cfg := ordersvc.LoadConfig(env)
			if err := env.Err(); err != nil {
				t.Fatal(err)
			}
			logs := &apptest.LogBuffer{}
			runServiceLogging(t, cfg, ns, logs)
			warned := 0
			for _, r := range logs.Records() {
				if msg, _ := r["msg"].(string); strings.Contains(msg, warning) && strings.Contains(msg, ordersvc.EnvAPIToken) && r["level"] == "WARN" {
					warned++
				}
			}
			if warned != tc.warns {
				t.Errorf("%d warnings, want %d:\n%s", warned, tc.warns, logs)
			}
		})
	}
}
