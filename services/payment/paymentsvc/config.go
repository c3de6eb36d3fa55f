package paymentsvc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/services/internal/idrange"
)

// Environment variables read by LoadConfig, besides the shared ones of app.LoadConfig.
const (
	EnvSeedCustomers = "PAYMENT_SEED_CUSTOMERS"
	EnvLatency       = "PAYMENT_LATENCY"
	EnvFailureRate   = "PAYMENT_FAILURE_RATE"
	EnvHangCustomers = "PAYMENT_HANG_CUSTOMERS"
	EnvGroup         = "PAYMENT_GROUP"
	// EnvReconcileInterval: the period of the reconciliation (default
	// DefaultReconcileInterval).
	EnvReconcileInterval = "PAYMENT_RECONCILE_INTERVAL"
	// EnvAuthorizedVersion: the schema version of the payment.authorized events the
	// service writes, 1 or 2 (default 1; see Config.AuthorizedVersion).
	EnvAuthorizedVersion = "PAYMENT_AUTHORIZED_VERSION"
)

// EnvVars lists every environment variable the payment service reads (OTEL_* aside).
func EnvVars() []string {
	return append(app.EnvVars(), EnvSeedCustomers, EnvLatency, EnvFailureRate, EnvHangCustomers, EnvGroup, EnvReconcileInterval, EnvAuthorizedVersion)
}

// Defaults.
const (
	// DefaultHTTPAddr is the default HTTP_ADDR of the payment service.
	DefaultHTTPAddr = ":8081"
	// DefaultSeedCustomers seeds c-1..c-100 with $100,000 each and a $1,000 limit per
	// charge, c-poor whose limit ($1) declines every realistic order, and c-hang, whose
	// orders the default hang knob parks forever.
	DefaultSeedCustomers = "c-1..c-100:10000000:100000,c-poor:100000:100,c-hang:10000000:100000"
	// DefaultHangCustomers: orders of these customers are never answered (a stuck order
	// on purpose, for the demo).
	DefaultHangCustomers = "c-hang"
	// DefaultGroup is the consumer group.
	DefaultGroup = "payment"
	// DefaultReconcileInterval is the period of the reconciliation (see Reconciler).
	DefaultReconcileInterval = 30 * time.Second
)

// Customer is one seeded customer. Amounts are in cents.
type Customer struct {
	ID string
	// Balance is the money available at seeding; a charge above the current balance is
	// declined ("insufficient funds").
	Balance int64
	// Limit caps a single charge; a charge above it is declined ("over limit").
	Limit int64
}

// Config is the payment service's configuration.
type Config struct {
	// App is the shared plumbing configuration.
	App app.Config
	// Group is the Kafka consumer group (PAYMENT_GROUP, default DefaultGroup).
	Group string
	// Customers are inserted at start if missing (PAYMENT_SEED_CUSTOMERS, default
	// DefaultSeedCustomers). Existing customers are never overwritten, so a restart
	// keeps balances and money stays conserved. Format: comma-separated
	// ID:BALANCE[:LIMIT] entries, cents; LIMIT defaults to BALANCE; ID may be a range
	// "c-1..c-100" (same prefix, decimal suffixes).
	Customers []Customer
	// Latency is added to every charge, as a slow payment gateway would
	// (PAYMENT_LATENCY, default 0).
	Latency time.Duration
	// FailureRate is the probability in [0, 1] that a charge attempt fails with the
	// retryable ErrGatewayUnavailable (PAYMENT_FAILURE_RATE, default 0).
	FailureRate float64
	// HangCustomers lists customers whose order.created is recorded as "held" and never
	// answered, producing a stuck order on purpose; a cancel still completes it
	// (PAYMENT_HANG_CUSTOMERS, comma-separated, default DefaultHangCustomers; "none"
	// disables).
	HangCustomers []string
	// ReconcileInterval is the period of the reconciliation that refunds charges of
	// orders that ended REJECTED or CANCELLED (PAYMENT_RECONCILE_INTERVAL, default
	// DefaultReconcileInterval; 0 in a Config means the default).
	ReconcileInterval time.Duration
	// AuthorizedVersion is the schema version of the payment.authorized events written,
	// 1 (events.PaymentV1) or 2 (events.PaymentAuthorizedV2) (PAYMENT_AUTHORIZED_VERSION,
	// default 1; 0 in a Config means 1). The service declares producing both; switch to
	// 2 once every consumer handles it (docs/contracts.md, "Evolving an event").
	AuthorizedVersion int
	// Random returns a uniform number in [0, 1) for FailureRate (default
	// math/rand/v2.Float64). Not read from the environment.
	Random func() float64
	// AppOptions are passed to app.New (tests: app.WithListener, app.WithoutSignals,
	// app.WithLogOutput). Not read from the environment.
	AppOptions []app.Option
}

// LoadConfig reads the configuration from env; problems are recorded in env (see
// app.Env.Err).
func LoadConfig(env *app.Env) Config {
	c := Config{
		App:               app.LoadConfig(env, "payment", DefaultHTTPAddr),
		Group:             env.String(EnvGroup, DefaultGroup),
		Latency:           env.Duration(EnvLatency, 0),
		FailureRate:       env.Float64(EnvFailureRate, 0),
		HangCustomers:     env.List(EnvHangCustomers, []string{DefaultHangCustomers}),
		ReconcileInterval: env.Duration(EnvReconcileInterval, DefaultReconcileInterval),
		AuthorizedVersion: env.Int(EnvAuthorizedVersion, 1),
	}
	env.Check(EnvReconcileInterval, c.ReconcileInterval > 0, "must be positive")
	if len(c.HangCustomers) == 1 && strings.EqualFold(c.HangCustomers[0], "none") {
		c.HangCustomers = nil
	}
	env.Check(EnvFailureRate, c.FailureRate >= 0 && c.FailureRate <= 1, "must be between 0 and 1")
	env.Check(EnvAuthorizedVersion, c.AuthorizedVersion == 1 || c.AuthorizedVersion == 2, "must be 1 or 2")
	cs, err := ParseCustomers(env.String(EnvSeedCustomers, DefaultSeedCustomers))
	if err != nil {
		env.Fail(EnvSeedCustomers, err.Error())
	}
	c.Customers = cs
	return c
}

// Validate reports every problem of c (each matching app.ErrInvalidConfig).
func (c Config) Validate() error {
	env := app.MapEnv(nil)
	env.Check(EnvGroup, c.Group != "", "empty consumer group")
	env.Check(EnvFailureRate, c.FailureRate >= 0 && c.FailureRate <= 1, "must be between 0 and 1")
	env.Check(EnvLatency, c.Latency >= 0, "must not be negative")
	env.Check(EnvReconcileInterval, c.ReconcileInterval >= 0, "must not be negative")
	env.Check(EnvAuthorizedVersion, c.AuthorizedVersion >= 0 && c.AuthorizedVersion <= 2, "must be 1 or 2")
	seen := make(map[string]bool, len(c.Customers))
	for _, cu := range c.Customers {
		env.Check(EnvSeedCustomers, cu.ID != "" && cu.Balance >= 0 && cu.Limit >= 0,
			fmt.Sprintf("customer %q: empty id or negative amount", cu.ID))
		env.Check(EnvSeedCustomers, !seen[cu.ID], fmt.Sprintf("customer %q listed twice", cu.ID))
		seen[cu.ID] = true
	}
	return errors.Join(c.App.Validate(), env.Err())
}

func (c Config) random() func() float64 {
	if c.Random != nil {
		return c.Random
	}
	return rand.Float64
}

// ParseCustomers parses the PAYMENT_SEED_CUSTOMERS format (see Config.Customers).
func ParseCustomers(s string) ([]Customer, error) {
	var out []Customer
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.Split(entry, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("entry %q: want ID:BALANCE[:LIMIT]", entry)
		}
		balance, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || balance < 0 {
			return nil, fmt.Errorf("entry %q: balance is not a non-negative integer (cents)", entry)
		}
		limit := balance
		if len(parts) == 3 {
			if limit, err = strconv.ParseInt(parts[2], 10, 64); err != nil || limit < 0 {
				return nil, fmt.Errorf("entry %q: limit is not a non-negative integer (cents)", entry)
			}
		}
		ids, err := idrange.Expand(parts[0])
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		for _, id := range ids {
			if seen[id] {
				return nil, fmt.Errorf("customer %q listed twice", id)
			}
			seen[id] = true
			out = append(out, Customer{ID: id, Balance: balance, Limit: limit})
		}
	}
	return out, nil
}
