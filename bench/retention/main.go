// Command retention compares two ways of keeping a sliding retention window in the
// idempotency table, in one run: deleting expired rows (what idempotency.Sweeper does)
// and dropping whole time partitions (partition rotation).
//
// For each rate in -rates it replays the same churn against both designs on a clock of
// its own, so an hour of traffic takes seconds: every simulated second it inserts that
// many records (event-id keys as UUIDv7 text, in three scopes, arriving up to 200 ms out
// of order, as consumers of several partitions deliver them), for -windows retention
// windows. Every twentieth of the window (as the soak's clean-ups run) the delete design
// deletes the expired rows and then vacuums the table, the best case autovacuum can give
// it; the partition design drops every partition whose rows have all expired. The delete
// design is choreo's table made by migrate.Up; the partition design is the same columns
// partitioned by expires_at, one partition per twentieth of the window, its primary key
// (scope, key, expires_at).
//
// It reports each design's size (pg_table_size and pg_indexes_size of the table or its
// partitions) when the window was first reached (before the first clean-up that finds
// expired rows), at the end and at its largest after the first window (sampled before
// each clean-up), and the end and largest ÷ first-reached, which the soak bounds at 1.1. A partition key cannot make (scope,
// key) unique across partitions, so a claim there must serialize on the key and look in
// every partition; -claims measures that: claims/s of new keys with -writers concurrent
// claimers on a full window, the delete design's one INSERT … ON CONFLICT against the
// partition design's advisory lock on the key plus INSERT … WHERE NOT EXISTS, each one
// round trip.
//
//	go run ./bench/retention                      # as make bench runs it
//	go run ./bench/retention -rates 300 -windows 3 -claims 2s -json ''
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/bench/internal/benchutil"
	"github.com/choreo-saga/choreo/migrate"
)

// steps is how many clean-ups a retention window has (the soak's clean-up pace).
const steps = 20

type config struct {
	pg      string
	rates   []int
	window  int // simulated seconds
	windows int
	claims  time.Duration
	writers int
	json    string
}

// design is one way of keeping the window.
type design struct {
	name string
	// setup makes the table, empty.
	setup func(ctx context.Context, db *pgxpool.Pool, c config) error
	// cleanUp runs at simulated second now, a clean-up boundary.
	cleanUp func(ctx context.Context, db *pgxpool.Pool, c config, now int) error
	// before runs ahead of the inserts of simulated second now (partitions to come); nil: nothing.
	before func(ctx context.Context, db *pgxpool.Pool, c config, now int) error
	// beforeClaims makes room for the timed claims; nil: nothing to make.
	beforeClaims func(ctx context.Context, db *pgxpool.Pool) error
	// claim is one claim of a new key, one round trip.
	claim func(ctx context.Context, db *pgxpool.Pool, scope, key string) error
}

// sizes is a table's footprint at one moment.
type sizes struct {
	Heap  int64 `json:"heap_bytes"`
	Index int64 `json:"index_bytes"`
	Rows  int64 `json:"rows"`
}

func (s sizes) total() int64 { return s.Heap + s.Index }

// result is one design at one rate.
type result struct {
	Design       string  `json:"design"`
	Rate         int     `json:"rows_per_sec"`
	AtWindow     sizes   `json:"at_window"`
	End          sizes   `json:"end"`
	Max          sizes   `json:"max_after_window"`
	Ratio        float64 `json:"end_over_window"`
	MaxRatio     float64 `json:"max_over_window"`
	ClaimsPerSec float64 `json:"claims_per_sec"`
}

func main() {
	var c config
	var rates string
	flag.StringVar(&c.pg, "pg", benchutil.DefaultPostgresDSN(), "Postgres DSN of a database allowed to CREATE DATABASE")
	flag.StringVar(&rates, "rates", "300,3000", "records per simulated second, one run of both designs each (300 is the soak's table, 3000 ten times it)")
	flag.IntVar(&c.window, "window", 120, "retention window in simulated seconds")
	flag.IntVar(&c.windows, "windows", 5, "how many windows of churn to replay")
	flag.DurationVar(&c.claims, "claims", 5*time.Second, "how long each design's claims are timed on a full window (0: skip)")
	flag.IntVar(&c.writers, "writers", 8, "concurrent claimers")
	flag.StringVar(&c.json, "json", "bench/results.json", "merge the figures into this JSON file under the key \"retention\" ('' to skip)")
	flag.Parse()
	var err error
	if c.rates, err = benchutil.ParseInts(rates, 1); err != nil {
		fail(fmt.Errorf("-rates: %w", err))
	}
	if c.window < steps || c.window%steps != 0 || c.windows < 2 || c.writers < 1 {
		fail(errors.New("-window must be a positive multiple of 20, -windows at least 2, -writers at least 1"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "retention:", err)
	os.Exit(1)
}

func run(ctx context.Context, c config) error {
	var results []result
	for _, rate := range c.rates {
		for _, d := range designs() {
			r, err := measure(ctx, c, d, rate)
			if err != nil {
				return fmt.Errorf("%s at %d/s: %w", d.name, rate, err)
			}
			results = append(results, r)
		}
	}
	print(c, results)
	if c.json == "" {
		return nil
	}
	commit, dirty := benchutil.GitCommit(ctx)
	return benchutil.MergeJSON(c.json, "retention", map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "commit": commit, "dirty": dirty,
		"window_seconds": c.window, "windows": c.windows, "clean_ups_per_window": steps,
		"writers": c.writers, "claims_seconds": c.claims.Seconds(), "results": results,
	})
}

// measure replays the churn at rate against d in a database of its own, then times claims.
func measure(ctx context.Context, c config, d design, rate int) (result, error) {
	r := result{Design: d.name, Rate: rate}
	dsn, drop, err := benchutil.CreateDB(ctx, c.pg, "bench_retention")
	if err != nil {
		return r, err
	}
	defer func() { _ = drop() }()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return r, err
	}
	defer db.Close()
	if err := d.setup(ctx, db, c); err != nil {
		return r, fmt.Errorf("setup: %w", err)
	}
	every := c.window / steps
	for now := 0; now < c.window*c.windows; now++ {
		if now%every == 0 && now >= c.window {
			// Before the clean-up: the top of the saw. The first is the window as first
			// reached, every row of it still there.
			s, err := measureSizes(ctx, db)
			if err != nil {
				return r, err
			}
			switch {
			case now == c.window:
				r.AtWindow = s
			case s.total() > r.Max.total():
				r.Max = s
			}
		}
		if now%every == 0 {
			if err := d.cleanUp(ctx, db, c, now); err != nil {
				return r, fmt.Errorf("clean-up: %w", err)
			}
		}
		if d.before != nil {
			if err := d.before(ctx, db, c, now); err != nil {
				return r, fmt.Errorf("partitions: %w", err)
			}
		}
		if _, err := db.Exec(ctx, insertSQL, now, rate, c.window); err != nil {
			return r, fmt.Errorf("insert: %w", err)
		}
	}
	if r.End, err = measureSizes(ctx, db); err != nil {
		return r, err
	}
	r.Ratio = float64(r.End.total()) / float64(r.AtWindow.total())
	r.MaxRatio = float64(r.Max.total()) / float64(r.AtWindow.total())
	if c.claims > 0 {
		if r.ClaimsPerSec, err = timeClaims(ctx, db, c, d); err != nil {
			return r, fmt.Errorf("claims: %w", err)
		}
	}
	return r, nil
}

// insertSQL inserts $2 records of simulated second $1 with a window of $3 seconds: keys as
// UUIDv7 text (48-bit millisecond time, then random bits), three scopes, arriving up to
// 200 ms out of order.
const insertSQL = `INSERT INTO choreo_idempotency (scope, key, request_hash, response, created_at, expires_at)
SELECT 'orders.handler-' || (g % 3),
       substr(t, 1, 8) || '-' || substr(t, 9, 4) || '-7' || substr(h, 1, 3) || '-8' || substr(h, 4, 3) || '-' || substr(h, 7, 12),
       decode(md5(g::text), 'hex'), NULL,
       at, at + make_interval(secs => $3)
FROM (SELECT g, lpad(to_hex(ms::bigint), 12, '0') AS t, md5(random()::text) AS h,
             timestamptz '2026-01-01 00:00:00+00' + ms * interval '1 millisecond' AS at, ms
      FROM (SELECT g, $1::bigint * 1000 + g * 1000.0 / $2 AS ms FROM generate_series(0, $2 - 1) g) s) k
ORDER BY ms + random() * 200`

// simulated is simulated second s as a timestamptz literal.
func simulated(s int) string {
	return fmt.Sprintf("timestamptz '2026-01-01 00:00:00+00' + interval '%d seconds'", s)
}

func designs() []design {
	return []design{
		{
			name: "delete expired rows, then vacuum",
			setup: func(ctx context.Context, db *pgxpool.Pool, _ config) error {
				return migrate.Up(ctx, db)
			},
			cleanUp: func(ctx context.Context, db *pgxpool.Pool, _ config, now int) error {
				if _, err := db.Exec(ctx, "DELETE FROM choreo_idempotency WHERE expires_at <= "+simulated(now)); err != nil {
					return err
				}
				_, err := db.Exec(ctx, "VACUUM choreo_idempotency")
				return err
			},
			claim: func(ctx context.Context, db *pgxpool.Pool, scope, key string) error {
				_, err := db.Exec(ctx, `INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
VALUES ($1, $2, '\x00', now()) ON CONFLICT (scope, key) DO NOTHING`, scope, key)
				return err
			},
		},
		{
			name: "drop expired partitions",
			setup: func(ctx context.Context, db *pgxpool.Pool, _ config) error {
				_, err := db.Exec(ctx, `CREATE TABLE choreo_idempotency (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (scope, key, expires_at)
) PARTITION BY RANGE (expires_at)`)
				return err
			},
			cleanUp: func(ctx context.Context, db *pgxpool.Pool, c config, now int) error {
				every := c.window / steps
				// A partition holds expires_at in [p*every, (p+1)*every); it has expired
				// once its end is at or before now.
				for p := 0; (p+1)*every <= now; p++ {
					if _, err := db.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS choreo_idempotency_p%d", p)); err != nil {
						return err
					}
				}
				return nil
			},
			before: func(ctx context.Context, db *pgxpool.Pool, c config, now int) error {
				every := c.window / steps
				// This second's rows expire in [now+window, now+window+1.2 s) (the
				// out-of-order arrival); make the partitions ahead of them.
				for _, s := range []int{now + c.window, now + c.window + every} {
					p := s / every
					if _, err := db.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS choreo_idempotency_p%d PARTITION OF choreo_idempotency FOR VALUES FROM (%s) TO (%s)",
						p, simulated(p*every), simulated((p+1)*every))); err != nil {
						return err
					}
				}
				return nil
			},
			beforeClaims: func(ctx context.Context, db *pgxpool.Pool) error {
				_, err := db.Exec(ctx, "CREATE TABLE choreo_idempotency_claims PARTITION OF choreo_idempotency FOR VALUES FROM ("+claimExpiry+") TO (MAXVALUE)")
				return err
			},
			claim: func(ctx context.Context, db *pgxpool.Pool, scope, key string) error {
				// Serialize on the key, then insert it unless a partition holds it: the
				// INSERT's snapshot is taken after the lock, so it sees a claim that
				// committed while this one waited. Expires "now" on the simulated clock's
				// last partition would need one; the claims go to a partition of their own.
				b := &pgx.Batch{}
				b.Queue("SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))", scope, key)
				b.Queue(`INSERT INTO choreo_idempotency (scope, key, request_hash, expires_at)
SELECT $1, $2, '\x00', `+claimExpiry+` WHERE NOT EXISTS (SELECT 1 FROM choreo_idempotency WHERE scope = $1 AND key = $2)`, scope, key)
				return db.SendBatch(ctx, b).Close()
			},
		},
	}
}

// claimExpiry is where the timed claims expire: far past the replay, in a partition the
// partition design makes for them (the delete design needs none).
const claimExpiry = "timestamptz '2100-01-01 00:00:00+00'"

// timeClaims runs c.writers claimers of new keys against d for c.claims and returns claims/s.
func timeClaims(ctx context.Context, db *pgxpool.Pool, c config, d design) (float64, error) {
	if d.beforeClaims != nil {
		if err := d.beforeClaims(ctx, db); err != nil {
			return 0, err
		}
	}
	if _, err := db.Exec(ctx, "ANALYZE choreo_idempotency"); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.claims)
	defer cancel()
	var (
		n     atomic.Int64
		wg    sync.WaitGroup
		first error
		once  sync.Once
	)
	start := time.Now()
	for w := 0; w < c.writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := d.claim(ctx, db, "orders.handler-0", uuid.Must(uuid.NewV7()).String())
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { first = err })
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

func measureSizes(ctx context.Context, db *pgxpool.Pool) (sizes, error) {
	var s sizes
	err := db.QueryRow(ctx, `SELECT coalesce(sum(pg_table_size(c.oid)), 0), coalesce(sum(pg_indexes_size(c.oid)), 0),
    (SELECT count(*) FROM choreo_idempotency)
FROM pg_class c WHERE c.relkind = 'r' AND (c.relname = 'choreo_idempotency' OR c.relname LIKE 'choreo\_idempotency\_p%')`).Scan(&s.Heap, &s.Index, &s.Rows)
	if err != nil {
		return s, fmt.Errorf("sizes: %w", err)
	}
	return s, nil
}

func print(c config, results []result) {
	fmt.Printf("retention: one %d-second window (simulated), clean-ups every %d s, %d windows; claims: %d writers for %v on a full window\n",
		c.window, c.window/steps, c.windows, c.writers, c.claims)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "design\trows/s\tat window MB\t(heap/idx)\tend MB\t(heap/idx)\tend ÷ window\tmax ÷ window\tlimit\tclaims/s\t÷ delete\t")
	var plain float64
	for i, r := range results {
		if i%len(designs()) == 0 { // each rate's first result is deleting's, the baseline
			plain = r.ClaimsPerSec
		}
		claims := "-"
		if plain > 0 {
			claims = fmt.Sprintf("%.2f", r.ClaimsPerSec/plain)
		}
		fmt.Fprintf(w, "%s\t%d\t%.1f\t(%.1f/%.1f)\t%.1f\t(%.1f/%.1f)\t%.2f\t%.2f\t1.10\t%.0f\t%s\t\n", r.Design, r.Rate,
			mb(r.AtWindow.total()), mb(r.AtWindow.Heap), mb(r.AtWindow.Index),
			mb(r.End.total()), mb(r.End.Heap), mb(r.End.Index), r.Ratio, r.MaxRatio, r.ClaimsPerSec, claims)
	}
	_ = w.Flush()
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
