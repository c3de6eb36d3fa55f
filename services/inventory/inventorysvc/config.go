package inventorysvc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/internal/idrange"
)

// Environment variables read by LoadConfig, besides the shared ones of app.LoadConfig.
const (
	EnvSeed           = "INVENTORY_SEED"
	EnvReservationTTL = "INVENTORY_RESERVATION_TTL"
	EnvSweepInterval  = "INVENTORY_SWEEP_INTERVAL"
	EnvGroup          = "INVENTORY_GROUP"
	// EnvReconcileInterval: the period of the reconciliation (default
	// DefaultReconcileInterval).
	EnvReconcileInterval = "INVENTORY_RECONCILE_INTERVAL"
	// EnvOrphanAfter: how long a payment.authorized may wait for its order's
	// order.created before it is reported as an orphan (default DefaultOrphanAfter).
	EnvOrphanAfter = "INVENTORY_ORPHAN_AFTER"
)

// EnvVars lists every environment variable the inventory service reads (OTEL_* aside).
func EnvVars() []string {
	return append(app.EnvVars(), EnvSeed, EnvReservationTTL, EnvSweepInterval, EnvGroup, EnvReconcileInterval, EnvOrphanAfter)
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
	// DefaultReconcileInterval is the period of the reconciliation (see Reconciler).
	DefaultReconcileInterval = 30 * time.Second
	// DefaultOrphanAfter is how long a held payment.authorized waits for its order's
	// announcement before the reconciliation reports it as an orphan.
	DefaultOrphanAfter = 5 * time.Minute
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
	// ReconcileInterval is the period of the reconciliation that releases reservations
	// of orders that ended REJECTED or CANCELLED and reports orphans
	// (INVENTORY_RECONCILE_INTERVAL, default DefaultReconcileInterval; 0 in a Config means
	// the default).
	ReconcileInterval time.Duration
	// OrphanAfter is how long a payment.authorized for an order not announced by the
	// order service is held before it is reported as an orphan (INVENTORY_ORPHAN_AFTER,
	// default DefaultOrphanAfter; 0 in a Config means the default). It stays held: the
	// order's announcement still reserves.
	OrphanAfter time.Duration
	// AppOptions are passed to app.New. Not read from the environment.
	AppOptions []app.Option
}

// LoadConfig reads the configuration from env; problems are recorded in env (see
// app.Env.Err).
func LoadConfig(env *app.Env) Config {
	c := Config{
		App:               app.LoadConfig(env, "inventory", DefaultHTTPAddr),
		Group:             env.String(EnvGroup, DefaultGroup),
		ReservationTTL:    env.Duration(EnvReservationTTL, DefaultReservationTTL),
		SweepInterval:     env.Duration(EnvSweepInterval, DefaultSweepInterval),
		ReconcileInterval: env.Duration(EnvReconcileInterval, DefaultReconcileInterval),
		OrphanAfter:       env.Duration(EnvOrphanAfter, DefaultOrphanAfter),
	}
	env.Check(EnvReconcileInterval, c.ReconcileInterval > 0, "must be positive")
	env.Check(EnvOrphanAfter, c.OrphanAfter > 0, "must be positive")
	env.Check(EnvReservationTTL, c.ReservationTTL > 0, "must be positive")
	env.Check(EnvSweepInterval, c.SweepInterval > 0, "must be positive")
	st, err := ParseStock(env.String(EnvSeed, DefaultSeed))
	if err != nil {
		env.Fail(EnvSeed, err.Error())
	}
	c.Stock = st
	return c
}

// Validate reports every problem of c (each matching app.ErrInvalidConfig).
func (c Config) Validate() error {
	env := app.MapEnv(nil)
	env.Check(EnvGroup, c.Group != "", "empty consumer group")
	env.Check(EnvReservationTTL, c.ReservationTTL > 0, "must be positive")
	env.Check(EnvSweepInterval, c.SweepInterval > 0, "must be positive")
	env.Check(EnvReconcileInterval, c.ReconcileInterval >= 0, "must not be negative")
	env.Check(EnvOrphanAfter, c.OrphanAfter >= 0, "must not be negative")
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
		skus, err := idrange.Expand(id)
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
