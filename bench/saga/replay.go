package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/internal/procstat"
)

// sqlReplay is the saga against its own SQL (-statements): every transaction each service
// sent during the recorded rate, with its parameters, replayed by pgbench against the same
// database at the same concurrency, one service at a time. An order needs all three
// services' transactions, so the replayed orders/s of the machine is 1 / Σ 1/(service's).
type sqlReplay struct {
	RecordedAtOffered int                      `json:"recorded_at_offered_per_sec"`
	Clients           int                      `json:"clients"`
	Seconds           float64                  `json:"seconds_per_service"`
	Services          map[string]serviceReplay `json:"services"`
	OrdersPerSec      float64                  `json:"replayed_orders_per_sec"`
	// Ratio is the saturation (peak confirmed/s) over OrdersPerSec; the target is >= 0.5.
	Ratio float64 `json:"saturation_over_replay"`
	// CPUPerOrderUS: the Postgres backends' CPU per replayed order (all three services'),
	// against the saga's at saturation per process group (CPUPerConfirmedUS), from /proc.
	CPUPerOrderUS     float64            `json:"replay_cpu_per_order_us"`
	CPUPerConfirmedUS map[string]float64 `json:"saga_cpu_per_confirmed_us"`
	ScriptDir         string             `json:"script_dir,omitempty"`
}

// serviceReplay is one service's pgbench replay.
type serviceReplay struct {
	TxPerOrder   float64 `json:"tx_per_order"`
	Shapes       int     `json:"shapes"`
	Replayed     float64 `json:"replayed_share"`
	TPS          float64 `json:"tps"`
	OrdersPerSec float64 `json:"orders_per_sec"`
	// CPU per replayed order, µs: the database's backends serving pgbench, pgbench
	// itself, and the whole machine (other users' work included).
	PostgresCPUPerOrder float64 `json:"postgres_cpu_per_order_us"`
	PgbenchCPUPerOrder  float64 `json:"pgbench_cpu_per_order_us"`
	MachineCPUPerOrder  float64 `json:"machine_cpu_per_order_us"`
}

// replayStatements builds each service's script from the recorded transactions and runs
// pgbench with it for d at clients sessions against the service's database. scriptDir,
// if set, keeps the scripts.
func replayStatements(ctx context.Context, admin *pgxpool.Pool, pgURL string, databases map[string]string, txs map[string][]recordedTx,
	recorded map[string][]statementCount, orders, clients int, d time.Duration, scriptDir string, log io.Writer) (*sqlReplay, error) {
	out := &sqlReplay{Clients: clients, Seconds: d.Seconds(), Services: map[string]serviceReplay{}, ScriptDir: scriptDir}
	inv := 0.0
	for _, svc := range serviceNames {
		dsn, err := databaseURL(pgURL, databases[svc])
		if err != nil {
			return nil, err
		}
		types, err := parameterTypes(ctx, dsn, txs[svc])
		if err != nil {
			return nil, err
		}
		rows := map[string]float64{}
		for _, st := range recorded[svc] {
			if st.CallsPerOrder > 0 && !st.Nested {
				rows[st.Query] = st.RowsPerOrder / st.CallsPerOrder
			}
		}
		s := buildReplayScript(txs[svc], orders, replayInfo{Types: types, RowsPerCall: rows})
		if s.Script == "" {
			return nil, fmt.Errorf("saga: no statements of %s were recorded", svc)
		}
		if scriptDir != "" {
			if err := os.WriteFile(filepath.Join(scriptDir, svc+".pgbench"), []byte(s.Script), 0o644); err != nil {
				return nil, fmt.Errorf("saga: %w", err)
			}
		}
		fmt.Fprintf(log, "saga: replaying %s's transactions with pgbench (%.2f per order, %d shapes), %d clients for %s\n",
			svc, s.TxPerOrder, s.Shapes, clients, d)
		backends := sampleBackendCPU(ctx, admin, databases[svc])
		// Generic plans: a custom plan would fold every recorded instance's values
		// again at each execution, a cost the services' statements do not have.
		r, err := benchutil.Pgbench{DSN: dsn, Script: s.Script, Clients: clients, Duration: d,
			PGOptions: "-c plan_cache_mode=force_generic_plan"}.Run(ctx)
		pgCPU := backends()
		if err != nil {
			return nil, fmt.Errorf("saga: replay of %s: %w", svc, err)
		}
		sr := serviceReplay{TxPerOrder: s.TxPerOrder, Shapes: s.Shapes, Replayed: s.Replayed, TPS: r.TPS,
			OrdersPerSec: r.TPS / s.TxPerOrder}
		if r.Transactions > 0 {
			per := func(c time.Duration) float64 {
				return float64(c.Microseconds()) / float64(r.Transactions) * s.TxPerOrder
			}
			sr.PostgresCPUPerOrder, sr.PgbenchCPUPerOrder, sr.MachineCPUPerOrder = per(pgCPU), per(r.CPU.Process), per(r.CPU.Machine)
		}
		out.Services[svc] = sr
		out.CPUPerOrderUS += sr.PostgresCPUPerOrder
		inv += 1 / sr.OrdersPerSec
	}
	out.OrdersPerSec = 1 / inv
	return out, nil
}

// sampleBackendCPU follows the CPU of the pgbench sessions in database db every 100 ms
// until the returned function is called, which returns their CPU since each was first
// seen (the last 100 ms of a session that ends before then are not counted).
func sampleBackendCPU(ctx context.Context, admin *pgxpool.Pool, db string) func() time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	first, last := map[int]time.Duration{}, map[int]time.Duration{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'pgbench'", db)
			if err == nil {
				pids, _ := pgx.CollectRows(rows, pgx.RowTo[int])
				for _, pid := range pids {
					c, err := procstat.CPU(pid)
					if err != nil {
						continue
					}
					if _, ok := first[pid]; !ok {
						first[pid] = c
					}
					last[pid] = c
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() time.Duration {
		cancel()
		<-done
		var sum time.Duration
		for pid, c := range last {
			sum += c - first[pid]
		}
		return sum
	}
}

// parameterTypes prepares every recorded query in the database and returns the parameter
// types Postgres infers (a query that does not prepare is left out: its literals stay
// untyped).
func parameterTypes(ctx context.Context, dsn string, txs []recordedTx) (map[string][]string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("saga: replay: %w", err)
	}
	defer conn.Close(ctx)
	out := map[string][]string{}
	for _, tx := range txs {
		for _, st := range tx.Stmts {
			if _, ok := out[st.Query]; ok || len(st.Params) == 0 {
				continue
			}
			out[st.Query] = nil
			sd, err := conn.Prepare(ctx, "", st.Query)
			if err != nil {
				continue
			}
			var types []string
			for _, oid := range sd.ParamOIDs {
				var name string
				if err := conn.QueryRow(ctx, "SELECT format_type($1, NULL)", oid).Scan(&name); err != nil {
					return nil, fmt.Errorf("saga: replay: %w", err)
				}
				types = append(types, name)
			}
			out[st.Query] = types
		}
	}
	return out, nil
}

// databaseURL is pgURL with its database replaced by db.
func databaseURL(pgURL, db string) (string, error) {
	cfg, err := pgx.ParseConfig(pgURL)
	if err != nil {
		return "", fmt.Errorf("saga: %w", err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, db), nil
}

// replayLine is the summary line of the replay.
func (r *sqlReplay) replayLine() string {
	var parts []string
	for _, svc := range serviceNames {
		s := r.Services[svc]
		parts = append(parts, fmt.Sprintf("%s %.0f tx/s ÷ %.2f = %.0f orders/s (%.0f%% of its transactions replayed; µs per order: Postgres %.0f, pgbench %.0f)",
			svc, s.TPS, s.TxPerOrder, s.OrdersPerSec, 100*s.Replayed, s.PostgresCPUPerOrder, s.PgbenchCPUPerOrder))
	}
	return strings.Join(parts, "; ")
}

// recordAndReplay records every statement the services send, with its parameters, while
// rate orders/s (the peak's offered rate: the statements an order costs at saturation,
// batches included) are offered for cfg.record (window and drain), then freezes the services
// and replays each one's transactions with pgbench (cfg.partitions clients, as many as
// the consumers' partitions). res's peak rate gives the figures to compare.
func recordAndReplay(ctx context.Context, cfg config, s *session, pgURL string, rate int, res *results) (*sqlReplay, error) {
	file, offset, err := statementLogOffset(ctx, s.admin)
	if err != nil {
		return nil, err
	}
	if err := setStatementLogging(ctx, s.admin, true); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.log, "saga: recording every statement with its parameters at %d/s offered for %s\n", rate, cfg.record)
	resetStatements(ctx, s.admin)
	r, err := runRate(ctx, cfg, rate, cfg.record, s)
	if offErr := setStatementLogging(ctx, s.admin, false); err == nil {
		err = offErr
	}
	if err != nil {
		return nil, err
	}
	txs, err := readStatementLog(file, offset, s.sys.Databases())
	if err != nil {
		return nil, err
	}
	s.freeze(true)
	defer s.freeze(false)
	recorded := readStatements(ctx, s.admin, s.sys.Databases(), r.created)
	out, err := replayStatements(ctx, s.admin, pgURL, s.sys.Databases(), txs, recorded, r.created, cfg.partitions, cfg.replayTime, cfg.replayDir, cfg.log)
	if err != nil {
		return nil, err
	}
	out.RecordedAtOffered = rate
	out.Ratio = res.PeakConfirmedPerSec / out.OrdersPerSec
	out.CPUPerConfirmedUS = cpuPerConfirmed(res)
	return out, nil
}

// cpuPerConfirmed is the CPU of each process group (and of its Postgres backends, as
// "postgres/<service>") per order confirmed at the saturation rate, in µs, from /proc.
func cpuPerConfirmed(res *results) map[string]float64 {
	out := map[string]float64{}
	for _, rr := range res.Rates {
		if rr.Offered != res.PeakAtOffered || rr.ConfirmedPerSec <= 0 {
			continue
		}
		per := func(pct float64) float64 { return pct / 100 * 1e6 / rr.ConfirmedPerSec }
		for g, st := range rr.Services {
			out[g] = per(st.CPUPercent)
			if st.PostgresCPUPercent > 0 {
				out["postgres/"+g] = per(st.PostgresCPUPercent)
			}
		}
		out["generator"] = per(rr.GeneratorCPUPercent)
		out["machine"] = per(rr.MachineCPUPercent * float64(res.CPUs))
	}
	return out
}
