package inventorysvc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/app"
)

// Environment variables read by LoadConfig, besides the shared ones of app.LoadConfig.
const (
	EnvSeed           = "INVENTORY_SEED"
	EnvReservationTTL = "INVENTORY_RESERVATION_TTL"
	EnvSweepInterval  = "INVENTORY_SWEEP_INTERVAL"
	EnvGroup          = "INVENTORY_GROUP"
)

// EnvVars lists every environment variable the inventory service reads (OTEL_* aside).
func EnvVars() []string {
	return append(app.EnvVars(), EnvSeed, EnvReservationTTL, EnvSweepInterval, EnvGroup)
}

// Defaults.
const (
	// DefaultHTTPAddr is the default HTTP_ADDR of the inventory service.
	DefaultHTTPAddr = ":8082"
	// DefaultSeed seeds sku-1..sku-20 with 10000 units each and sku-rare with none
	// (every order of it is out of stock).
	DefaultSeed = "sku-1..sku-20:10000,sku-rare:0"
	// DefaultReservationTTL is how long an unconfirmed reservation holds its stock.
	DefaultReservationTTL = 15 * time.Minute
	// DefaultSweepInterval is the pause between two sweeps for expired reservations.
	DefaultSweepInterval = 5 * time.Second
	// DefaultGroup is the consumer group.
	DefaultGroup = "inventory"
)

// Stock is the seeded quantity of one SKU.
type Stock struct {
	SKU string
	Qty int64
}

// Config is the inventory service's configuration.
type Config struct {
	// App is the shared plumbing configuration.
	App app.Config
	// Group is the Kafka consumer group (INVENTORY_GROUP, default DefaultGroup).
	Group string
	// Stock is inserted at start for SKUs that do not exist yet (INVENTORY_SEED, default
	// DefaultSeed); existing SKUs are never overwritten, so a restart keeps stock levels.
	// Format: comma-separated SKU:QTY entries; SKU may be a range "sku-1..sku-20".
	Stock []Stock
	// ReservationTTL is how long a reservation waits for order.confirmed before the
	// sweeper releases it (INVENTORY_RESERVATION_TTL, default DefaultReservationTTL). Keep
	// it far above the saga's normal latency: an order confirmed after its reservation
	// expired has to take the stock again.
	ReservationTTL time.Duration
	// SweepInterval is the pause between sweeps (INVENTORY_SWEEP_INTERVAL, default
	// DefaultSweepInterval).
	SweepInterval time.Duration
	// AppOptions are passed to app.New. Not read from the environment.
	AppOptions []app.Option
}

// LoadConfig reads the configuration from env; problems are recorded in env (see
// app.Env.Err).
func LoadConfig(env *app.Env) Config {
	c := Config{
		App:            app.LoadConfig(env, "inventory", DefaultHTTPAddr),
		Group:          env.String(EnvGroup, DefaultGroup),
		ReservationTTL: env.Duration(EnvReservationTTL, DefaultReservationTTL),
		SweepInterval:  env.Duration(EnvSweepInterval, DefaultSweepInterval),
	}
	env.Check(EnvReservationTTL, c.ReservationTTL > 0, "must be positive")
	env.Check(EnvSweepInterval, c.SweepInterval > 0, "must be positive")
	st, err := ParseStock(env.String(EnvSeed, DefaultSeed))
	if err != nil {
		env.Fail(EnvSeed, err.Error())
	}
	c.Stock = st
	return c
}

// Validate reports every problem of c (each matching app.ErrConfig).
func (c Config) Validate() error {
	env := app.MapEnv(nil)
	env.Check(EnvGroup, c.Group != "", "empty consumer group")
	env.Check(EnvReservationTTL, c.ReservationTTL > 0, "must be positive")
	env.Check(EnvSweepInterval, c.SweepInterval > 0, "must be positive")
	seen := make(map[string]bool, len(c.Stock))
	for _, s := range c.Stock {
		env.Check(EnvSeed, s.SKU != "" && s.Qty >= 0, fmt.Sprintf("sku %q: empty or negative quantity", s.SKU))
		env.Check(EnvSeed, !seen[s.SKU], fmt.Sprintf("sku %q listed twice", s.SKU))
		seen[s.SKU] = true
	}
	return errors.Join(c.App.Validate(), env.Err())
}

// ParseStock parses the INVENTORY_SEED format (see Config.Stock).
func ParseStock(s string) ([]Stock, error) {
	var out []Stock
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		id, q, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("entry %q: want SKU:QTY", entry)
		}
		qty, err := strconv.ParseInt(q, 10, 64)
		if err != nil || qty < 0 {
			return nil, fmt.Errorf("entry %q: quantity is not a non-negative integer", entry)
		}
		skus, err := app.ExpandRange(id)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		for _, sku := range skus {
			if seen[sku] {
				return nil, fmt.Errorf("sku %q listed twice", sku)
			}
			seen[sku] = true
			out = append(out, Stock{SKU: sku, Qty: qty})
		}
	}
	return out, nil
}
