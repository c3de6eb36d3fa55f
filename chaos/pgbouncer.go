package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/internal/testenv/pgcluster"
)

// The pgbouncer scenario: every instance's pool reaches Postgres through a PgBouncer in
// transaction-pooling mode (Options.PgBouncer), the outbox relays' sessions directly
// (DATABASE_SESSION_URL). It is not one of [Scenarios] (`make chaos`): cmd/chaos runs it
// by name (`make chaos-pgbouncer`, which installs Debian's pgbouncer first).

// FaultPgBouncer is a kill -9 of the PgBouncer in front of the services' pools, started
// again after a pause.
const FaultPgBouncer = "pgbouncer kill-9"

// Defaults of the pgbouncer scenario.
const (
	// pgbouncerInstances of each service, unless Options.Instances says otherwise.
	pgbouncerInstances = 4
	// pgbouncerPoolSize is PgBouncer's default_pool_size: the most server connections it
	// opens per database (and user), whatever the number of instances and their pools.
	pgbouncerPoolSize = 20
	// pgbouncerHarnessConns are the harness's own sessions on the run's databases that
	// may overlap the load (the relay-leader lookup goes through the maintenance database).
	pgbouncerHarnessConns = 4
)

// QueryModeBehindPgBouncer is the pgx query mode of a pool behind a transaction-mode
// PgBouncer older than 1.21 (Debian 12 ships 1.18), which cannot keep a named prepared
// statement on the server connection it was prepared on: statement descriptions are
// cached by the client and every execution uses the unnamed statement, in one round trip.
const QueryModeBehindPgBouncer = "cache_describe"

var pgbouncerScenario = Scenario{
	Name: "pgbouncer",
	Doc:  pgbouncerDoc(pgbouncerInstances),
	own:  runPgBouncer,
}

func pgbouncerDoc(instances int) string {
	return fmt.Sprintf("%d instances of each service, their pools (the services' default sizes) through a PgBouncer in transaction mode "+
		"(default_pool_size %d, pgx default_query_exec_mode=%s), the outbox relays' sessions direct (DATABASE_SESSION_URL); "+
		"kill -9 of a service instance every 2–6 s (12 kills, every 3rd the relay leader), PgBouncer itself killed -9 and "+
		"restarted after 3 s between the 6th and the 7th; Postgres connections sampled against the bound PgBouncer sets",
		instances, pgbouncerPoolSize, QueryModeBehindPgBouncer)
}

// runPgBouncer runs the pgbouncer scenario: the usual run on a system behind PgBouncer,
// plus the connection figure.
func runPgBouncer(ctx context.Context, sc Scenario, c Config) Result {
	if c.System.Instances <= 0 {
		c.System.Instances = pgbouncerInstances
	}
	c.System.PgBouncer = true
	// The services' own default pool sizes (an empty DATABASE_MAX_CONNS is unset): the
	// bound on Postgres' connections is PgBouncer's, not the pools'.
	c.System.Env = append(slices.Clone(c.System.Env), "DATABASE_MAX_CONNS=")
	sc.Doc = pgbouncerDoc(c.System.Instances)
	sc.own = nil
	var (
		conns  connPeaks
		limit  int
		detail string
	)
	sc.Faults = func(ctx context.Context, r *run, c Config) {
		var wg sync.WaitGroup
		wg.Go(func() { conns.sample(ctx, r.s) })
		// Half the kills, PgBouncer's, then the other half: an instance restarted while
		// PgBouncer is down would exit at start (its database unreachable) and stay down,
		// as the harness restarts an instance once.
		kills := scaled(12, c)
		every := min(6*time.Second, max(2*time.Second, loadDuration(c)/time.Duration(kills+2)))
		r.killLoop(ctx, kills/2, every, 1500*time.Millisecond, 3)
		if sleep(ctx, every) {
			r.pgbouncerRestart(ctx, 3*time.Second)
		}
		r.killLoop(ctx, kills-kills/2, every, 1500*time.Millisecond, 3)
		wg.Wait()
		limit = len(services)*pgbouncerPoolSize + r.s.relaySessions() + pgbouncerHarnessConns
		detail = conns.String()
	}
	res := Run(ctx, sc, c)
	if res.Err != "" {
		return res
	}
	f := Figure{Name: "Postgres connections of the run's databases, peak", Value: float64(conns.backends), Limit: float64(limit), Detail: detail}
	if conns.samples == 0 {
		f.Missing, f.Detail = true, "no sample of pg_stat_activity"
	}
	res.Figures = append(res.Figures, f)
	if !f.OK() {
		res.Anomalies = append(res.Anomalies, Anomaly{Invariant: f.Name, Detail: f.String()})
	}
	return res
}

// relaySessions is the most sessions the outbox relays open outside the pools: one per
// instance, and a second (LISTEN) on each service's leader.
func (s *System) relaySessions() int { return s.opts.Instances*len(services) + len(services) }

// pgBouncer is a PgBouncer of the system's own, in front of the shared Postgres.
type pgBouncer struct {
	proc *proc
	addr string
}

// startPgBouncer starts a PgBouncer on a free port, with its configuration in the
// system's directory: transaction pooling, trust authentication, default_pool_size
// pgbouncerPoolSize, every database of the system's Postgres.
func (s *System) startPgBouncer(ctx context.Context) error {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			return fmt.Errorf("chaos: pgbouncer is not installed (scripts/ensure-pgbouncer.sh installs Debian's): %w", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	cfg, err := pgx.ParseConfig(s.opts.PostgresURL)
	if err != nil {
		return fmt.Errorf("chaos: postgres URL: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "pgbouncer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(strconv.Quote(cfg.User)+` ""`+"\n"), 0o644); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	ini := strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", cfg.Host, cfg.Port),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + users,
		"admin_users = " + cfg.User,
		"pool_mode = transaction",
		"max_client_conn = 4000",
		"default_pool_size = " + strconv.Itoa(pgbouncerPoolSize),
		"ignore_startup_parameters = extra_float_digits",
		"log_connections = 0",
		"log_disconnections = 0",
		"",
	}, "\n")
	path := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(path, []byte(ini), 0o644); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	args := []string{path}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root: it reads its files, then becomes postgres.
		if _, err := user.Lookup("postgres"); err != nil {
			return fmt.Errorf("chaos: pgbouncer does not run as root and there is no user postgres: %w", err)
		}
		args = []string{"-u", "postgres", path}
	}
	b := &pgBouncer{addr: "127.0.0.1:" + strconv.Itoa(port),
		proc: &proc{name: "pgbouncer", path: bin, args: args, logPath: s.logPath("pgbouncer")}}
	if err := b.start(ctx); err != nil {
		return err
	}
	s.bouncer = b
	s.logf("the services' pools reach Postgres through PgBouncer %s (transaction mode, default_pool_size %d)", b.addr, pgbouncerPoolSize)
	return nil
}

func (b *pgBouncer) start(ctx context.Context) error {
	if err := b.proc.start(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := pgcluster.WaitTCP(rctx, b.addr); err != nil {
		return fmt.Errorf("chaos: pgbouncer on %s: %w\n%s", b.addr, err, b.proc.tail(20))
	}
	return nil
}

// env returns the database variables of an instance whose database is direct: its pool
// through PgBouncer, its relay's sessions direct.
func (b *pgBouncer) env(direct string) ([]string, error) {
	cfg, err := pgx.ParseConfig(direct)
	if err != nil {
		return nil, fmt.Errorf("chaos: postgres URL: %w", err)
	}
	pooled := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&default_query_exec_mode=%s", cfg.User, b.addr, cfg.Database, QueryModeBehindPgBouncer)
	return []string{"DATABASE_URL=" + pooled, "DATABASE_SESSION_URL=" + direct}, nil
}

// pgbouncerRestart kills PgBouncer with SIGKILL and starts it again after down: every
// pool connection breaks at once, the relays' sessions stay.
func (r *run) pgbouncerRestart(ctx context.Context, down time.Duration) {
	b := r.s.bouncer
	if b == nil {
		return
	}
	start := time.Now()
	err := b.proc.kill9()
	if err == nil {
		sleep(ctx, down)
		// Not bounded by ctx: PgBouncer is never left dead.
		err = b.start(context.WithoutCancel(ctx))
	}
	r.record(FaultPgBouncer, "pgbouncer", fmt.Sprintf("down %s", down), start, err)
}

// connPeaks are the highest connection counts seen while the load ran.
type connPeaks struct {
	mu       sync.Mutex
	samples  int
	backends int // Postgres sessions on the run's databases
	direct   int // of them, the relays' (application_name choreo-outbox-…)
	clients  int // the instances' pool connections at PgBouncer
	servers  int // PgBouncer's server connections
}

func (c *connPeaks) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d samples; peaks: Postgres sessions %d (%d of them the relays', direct), PgBouncer's server connections %d, "+
		"the instances' pool connections to PgBouncer %d (what Postgres would serve without it)", c.samples, c.backends, c.direct, c.servers, c.clients)
}

// sample reads pg_stat_activity and PgBouncer's SHOW POOLS every 500 ms until ctx ends.
func (c *connPeaks) sample(ctx context.Context, s *System) {
	dbs := slices.Collect(maps.Values(s.dbs))
	for sleep(ctx, 500*time.Millisecond) {
		var backends, direct int
		err := s.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE application_name LIKE 'choreo-outbox-%')
			FROM pg_stat_activity WHERE datname = ANY($1)`, dbs).Scan(&backends, &direct)
		if err != nil {
			continue
		}
		clients, servers, _ := s.bouncer.pools(ctx, dbs)
		c.mu.Lock()
		c.samples++
		c.backends, c.direct = max(c.backends, backends), max(c.direct, direct)
		c.clients, c.servers = max(c.clients, clients), max(c.servers, servers)
		c.mu.Unlock()
	}
}

// pools sums SHOW POOLS of PgBouncer's admin console over dbs: client connections
// (active and waiting) and server connections.
func (b *pgBouncer) pools(ctx context.Context, dbs []string) (clients, servers int, err error) {
	if b == nil {
		return 0, 0, errors.New("chaos: no pgbouncer")
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	host, port, _ := net.SplitHostPort(b.addr)
	conn, err := pgx.Connect(qctx, fmt.Sprintf("postgres://postgres@%s:%s/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", host, port))
	if err != nil {
		return 0, 0, fmt.Errorf("chaos: pgbouncer admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(qctx, "SHOW POOLS")
	if err != nil {
		return 0, 0, fmt.Errorf("chaos: SHOW POOLS: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return 0, 0, fmt.Errorf("chaos: SHOW POOLS: %w", err)
		}
		col := map[string]string{}
		for i, fd := range rows.FieldDescriptions() {
			col[fd.Name] = fmt.Sprint(vals[i])
		}
		if !slices.Contains(dbs, col["database"]) {
			continue
		}
		n := func(names ...string) int {
			sum := 0
			for _, name := range names {
				v, _ := strconv.Atoi(col[name])
				sum += v
			}
			return sum
		}
		clients += n("cl_active", "cl_waiting")
		servers += n("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
	}
	return clients, servers, rows.Err()
}
