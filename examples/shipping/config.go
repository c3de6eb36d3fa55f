package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
)

// Config is what the service needs to run; loadConfig reads it from the environment.
type Config struct {
	Brokers       []string // KAFKA_BROKERS, required: comma-separated host:port
	PostgresDSN   string   // POSTGRES_DSN, required
	RedisAddr     string   // REDIS_ADDR, required: host:port
	HTTPAddr      string   // HTTP_ADDR: /metrics and /healthz (default ":8080")
	Group         string   // CONSUMER_GROUP (default "shipping")
	OrdersTopic   string   // ORDERS_TOPIC, consumed (default "orders.events")
	ShippingTopic string   // SHIPPING_TOPIC, produced (default "shipping.events")
	Partitions    int32    // TOPIC_PARTITIONS: partitions of the topics created here (default 6)
	MaxConns      int32    // PG_MAX_CONNS: Postgres pool size (default TOPIC_PARTITIONS + 4)
	LockNamespace string   // LOCK_NAMESPACE: prefix of the Redis lock keys (default "shipping:lock:")

	Logger   *slog.Logger // default slog.Default()
	Listener net.Listener // if set, HTTP is served on it instead of HTTPAddr (tests)
}

// loadConfig reads the configuration through getenv (os.Getenv) and reports every
// missing or invalid variable at once, each by name.
func loadConfig(getenv func(string) string) (Config, error) {
	var errs []string
	str := func(name, def string, required bool) string {
		v := strings.TrimSpace(getenv(name))
		if v == "" && required {
			errs = append(errs, fmt.Sprintf("%s is required", name))
		}
		if v == "" {
			return def
		}
		return v
	}
	num := func(name string, def int32) int32 {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Sprintf("%s=%q: want a whole number of at least 1", name, v))
			return def
		}
		return int32(n)
	}

	cfg := Config{
		PostgresDSN:   str("POSTGRES_DSN", "", true),
		RedisAddr:     str("REDIS_ADDR", "", true),
		HTTPAddr:      str("HTTP_ADDR", ":8080", false),
		Group:         str("CONSUMER_GROUP", "shipping", false),
		OrdersTopic:   str("ORDERS_TOPIC", "orders.events", false),
		ShippingTopic: str("SHIPPING_TOPIC", "shipping.events", false),
		Partitions:    num("TOPIC_PARTITIONS", 6),
		LockNamespace: str("LOCK_NAMESPACE", "shipping:lock:", false),
	}
	// One instance may own every partition of the consumed topic, and every partition
	// worker holds a connection while its transaction runs; the sweeper and /healthz
	// need a few more.
	cfg.MaxConns = num("PG_MAX_CONNS", cfg.Partitions+4)
	for b := range strings.SplitSeq(str("KAFKA_BROKERS", "", true), ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Sprintf("KAFKA_BROKERS: %q is not host:port", b))
		}
		cfg.Brokers = append(cfg.Brokers, b)
	}
	if cfg.OrdersTopic == cfg.ShippingTopic {
		errs = append(errs, fmt.Sprintf("ORDERS_TOPIC and SHIPPING_TOPIC are both %q", cfg.OrdersTopic))
	}
	if len(errs) > 0 {
		return Config{}, errors.New("shipping: configuration: " + strings.Join(errs, "; "))
	}
	return cfg, nil
}
