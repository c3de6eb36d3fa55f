package ordersvc

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/choreo-saga/choreo/app"
)

// Environment variables read by LoadConfig, besides the shared ones of app.LoadConfig
// (DATABASE_URL, REDIS_ADDR, KAFKA_BROKERS, KAFKA_PARTITIONS, HTTP_ADDR, LOG_LEVEL,
// SHUTDOWN_TIMEOUT, OTEL_*).
const (
	// EnvJaegerUIURL: the base URL of the trace UI, from which the order API builds each
	// order's jaeger_url (default DefaultJaegerUIURL; empty: no links).
	EnvJaegerUIURL = "JAEGER_UI_URL"
	// EnvStuckAfter: how long an order may stay in a non-terminal state before it is
	// stuck (default DefaultStuckAfter).
	EnvStuckAfter = "ORDER_STUCK_AFTER"
	// EnvStuckAfterCancelling overrides EnvStuckAfter for CANCELLING.
	EnvStuckAfterCancelling = "ORDER_STUCK_AFTER_CANCELLING"
	// EnvSagaTimeout: the durable saga deadline of a PENDING order (default
	// DefaultSagaTimeout); it must exceed the stuck threshold, so that a stuck order is
	// visible before it is cancelled.
	EnvSagaTimeout = "ORDER_SAGA_TIMEOUT"
	// EnvCompensationTimeout: the deadline of the first compensation attempt of a
	// CANCELLING order (default DefaultCompensationTimeout); each re-send waits twice as
	// long as the attempt before it, at most MaxCompensationBackoff times this.
	EnvCompensationTimeout = "ORDER_COMPENSATION_TIMEOUT"
	// EnvCompensationRetries: how many times a CANCELLING order re-sends its
	// cancellation before it becomes COMPENSATION_FAILED (default
	// DefaultCompensationRetries; 0 disables re-sends; at most MaxCompensationRetries).
	EnvCompensationRetries = "ORDER_COMPENSATION_RETRIES"
	// EnvSweepInterval: the period of the deadline sweeper and stuck gauge (default
	// DefaultSweepInterval).
	EnvSweepInterval = "ORDER_SWEEP_INTERVAL"
	// EnvGroup: the Kafka consumer group (default DefaultGroup).
	EnvGroup = "ORDER_GROUP"
	// EnvAPIToken: a bearer token the order API requires in "Authorization: Bearer
	// <token>" (default none: the API is open). /healthz, /readyz and /metrics do not
	// need it.
	EnvAPIToken = "ORDER_API_TOKEN"
	// EnvMaxPending: saga-level admission (see WithMaxPending): POST /orders answers 503
	// overloaded while at least this many orders are PENDING or CANCELLING (default
	// DefaultMaxPending; 0 turns it off).
	EnvMaxPending = "ORDER_MAX_PENDING"
)

// Defaults of Config.
const (
	// DefaultHTTPAddr is the default HTTP_ADDR of the order service: loopback only.
	// Listening on other interfaces (e.g. HTTP_ADDR=:8080 in a container) is a choice;
	// without ORDER_API_TOKEN the service then logs a warning at start.
	DefaultHTTPAddr = "127.0.0.1:8080"
	// DefaultGroup is the default consumer group.
	DefaultGroup = "order"
	// DefaultAPIConns is added to the shared default pool size ("DATABASE_MAX_CONNS") for
	// the order API's requests, when DATABASE_MAX_CONNS is not set.
	DefaultAPIConns = 32
	// MaxCompensationRetries bounds EnvCompensationRetries.
	MaxCompensationRetries = 20
	// DefaultJaegerUIURL is the default EnvJaegerUIURL: none, so the order API, sagactl
	// and the console print no trace link unless a Jaeger UI is configured (the compose
	// stack sets http://localhost:16686, where its Jaeger serves one).
	DefaultJaegerUIURL = ""
)

// EnvVars returns the names of the environment variables the order service reads
// itself (the shared ones are app's).
func EnvVars() []string {
	return []string{EnvJaegerUIURL, EnvStuckAfter, EnvStuckAfterCancelling, EnvSagaTimeout, EnvCompensationTimeout, EnvCompensationRetries,
		EnvSweepInterval, EnvGroup, EnvAPIToken, EnvMaxPending}
}

// Config is the order service's configuration.
type Config struct {
	// App is the shared plumbing configuration.
	App app.Config
	// Settings are the domain settings (deadlines, stuck thresholds, sweep period).
	Settings Settings
	// Group is the consumer group of the payment and inventory topics.
	Group string
	// APIToken, if set, is the bearer token the order API requires (ORDER_API_TOKEN).
	APIToken string
	// MaxInFlight caps the order API's requests served at once ("HTTP_MAX_IN_FLIGHT",
	// see admission.Limiter); the excess is answered 503 with Retry-After. 0 turns it off.
	// Default: the Postgres pool size, since every request holds a connection and more
	// would only queue for the pool.
	MaxInFlight int
	// MaxPending is the saga-level admission limit (EnvMaxPending, WithMaxPending): new
	// orders are refused with 503 while this many are PENDING or CANCELLING. 0 turns it
	// off. Default DefaultMaxPending.
	MaxPending int
	// AppOptions are passed to app.New (e.g. app.WithListener, app.WithoutSignals in
	// tests). Not read from the environment.
	AppOptions []app.Option
}

// LoadConfig reads the configuration from env; problems are recorded in env (see
// app.Env.Err), together with those of Validate.
func LoadConfig(env *app.Env) Config {
	stuck := env.Duration(EnvStuckAfter, DefaultStuckAfter)
	retries := env.Int(EnvCompensationRetries, DefaultCompensationRetries)
	env.Check(EnvCompensationRetries, retries >= 0 && retries <= MaxCompensationRetries,
		fmt.Sprintf("must be between 0 and %d", MaxCompensationRetries))
	if retries == 0 {
		retries = NoCompensationRetries
	}
	c := Config{
		App: app.LoadConfig(env, "order", DefaultHTTPAddr),
		Settings: Settings{
			SagaTimeout:         env.Duration(EnvSagaTimeout, DefaultSagaTimeout),
			CompensationTimeout: env.Duration(EnvCompensationTimeout, DefaultCompensationTimeout),
			CompensationRetries: retries,
			StuckAfter: map[State]time.Duration{
				Pending:    stuck,
				Cancelling: env.Duration(EnvStuckAfterCancelling, stuck),
			},
			SweepInterval: env.Duration(EnvSweepInterval, DefaultSweepInterval),
			JaegerUIURL:   env.String(EnvJaegerUIURL, DefaultJaegerUIURL),
		},
		Group:    env.String(EnvGroup, DefaultGroup),
		APIToken: env.String(EnvAPIToken, ""),
	}
	if env.String("DATABASE_MAX_CONNS", "") == "" && c.App.DatabaseMaxConns > 0 {
		// The shared default sizes the pool for the consumers; the order API's POSTs each
		// hold a connection too (measured: at 300 POST/s they queued for the pool).
		c.App.DatabaseMaxConns += DefaultAPIConns
	}
	c.MaxInFlight = env.Int("HTTP_MAX_IN_FLIGHT", int(c.App.DatabaseMaxConns))
	env.Check("HTTP_MAX_IN_FLIGHT", c.MaxInFlight >= 0, "must be 0 (off) or positive")
	c.MaxPending = env.Int(EnvMaxPending, DefaultMaxPending)
	for _, p := range c.problems() {
		env.Fail(p.key, p.reason)
	}
	return c
}

type problem struct{ key, reason string }

func (c Config) problems() []problem {
	var ps []problem
	check := func(key string, ok bool, reason string) {
		if !ok {
			ps = append(ps, problem{key, reason})
		}
	}
	s := c.Settings
	check(EnvSagaTimeout, s.SagaTimeout > 0, "must be positive")
	check(EnvCompensationTimeout, s.CompensationTimeout > 0, "must be positive")
	check(EnvCompensationRetries, s.CompensationRetries <= MaxCompensationRetries,
		fmt.Sprintf("must be at most %d", MaxCompensationRetries))
	check(EnvSweepInterval, s.SweepInterval > 0, "must be positive")
	check(EnvStuckAfter, s.StuckAfter[Pending] > 0, "must be positive")
	check(EnvStuckAfterCancelling, s.StuckAfter[Cancelling] > 0, "must be positive")
	check(EnvSagaTimeout, s.SagaTimeout > s.StuckAfter[Pending],
		fmt.Sprintf("must be longer than %s (%s), or stuck orders are cancelled before anyone sees them",
			EnvStuckAfter, s.StuckAfter[Pending]))
	check(EnvGroup, c.Group != "", "empty consumer group")
	check(EnvMaxPending, c.MaxPending >= 0, "must be 0 (off) or positive")
	u, err := url.Parse(s.JaegerUIURL)
	check(EnvJaegerUIURL, s.JaegerUIURL == "" || (err == nil && u.Scheme != "" && u.Host != ""), "not an absolute URL")
	return ps
}

// Validate reports every problem of c, each matching app.ErrInvalidConfig.
func (c Config) Validate() error {
	errs := []error{c.App.Validate()}
	for _, p := range c.problems() {
		errs = append(errs, fmt.Errorf("%w: %s: %s", app.ErrInvalidConfig, p.key, p.reason))
	}
	return errors.Join(errs...)
}
