package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/tracker"
)

// trackFlags are the flags of every track subcommand.
type trackFlags struct {
	c         conn
	dsn       string
	configs   string
	group     string
	table     string
	retention time.Duration
	refresh   time.Duration
	status    string
	svg       string        // flow: write the SVG here
	asyncapi  string        // flow: write the AsyncAPI document here
	last      time.Duration // flow: the events of this last window of event time only
	usage     usageFlags
	trusted   string // run: CHOREO_TRUSTED_KEYS, the keys the services require
	contracts string // run: the catalogue observed payloads are checked against (see observedCatalogue)
}

const trackUsage = `usage: sagactl track [run] [flags]           index the saga topics (its own consumer group) until interrupted
       sagactl track stuck [flags]           stuck sagas, the earliest missed deadline first
       sagactl track list [-status S] [flags] sagas (in_flight, stuck, completed; default all), oldest first
       sagactl track saga <correlation-id>   one correlation id's sagas, events and dead letters
       sagactl track rejected [flags]        records indexed escaped or cut, skipped, or refused as the services refuse them, newest first
       sagactl track observed [flags]        observed payloads that break a declared schema, per source, type, version and consumer
       sagactl flow [-last D] [-svg F] [-asyncapi F]  the observed flow: which event types followed which
       sagactl contracts usage [-window 24h] [-catalogue F] [-retire type@version]
                                             per event type and schema version: producers seen, first and
                                             last seen, events in the window, dead letters, the consumers that
                                             still handle or accept it (-catalogue), and whether it can be retired

The sagas are declared in JSON files (-config a.json,b.json; see deploy/tracker). The
index lives in its own Postgres table (-table), created on start.

Flags:`

// cmdTrack runs the saga tracker (package tracker) or queries its index.
func cmdTrack(ctx context.Context, args []string, std stdio) error {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	var f trackFlags
	fs := newFlagSet("track", std, &f.c)
	dbDefault := envOr(std.getenv, "TRACKER_DATABASE_URL", std.getenv("DATABASE_URL"))
	fs.StringVar(&f.dsn, "db", dbDefault, "Postgres connection `URL` of the index (env TRACKER_DATABASE_URL, else DATABASE_URL)")
	fs.StringVar(&f.dsn, "database-url", dbDefault, "same as -db")
	fs.StringVar(&f.configs, "config", std.getenv("TRACKER_CONFIG"), "comma-separated saga declaration `files` (JSON; env TRACKER_CONFIG)")
	fs.StringVar(&f.group, "group", tracker.DefaultGroup, "the tracker's own consumer `group`")
	fs.StringVar(&f.table, "table", tracker.DefaultTable, "index table `name`, optionally schema-qualified")
	fs.DurationVar(&f.retention, "retention", 7*24*time.Hour, "delete indexed events older than this (by event time)")
	fs.DurationVar(&f.refresh, "refresh", 15*time.Second, "how often run recomputes its gauges and applies retention")
	fs.StringVar(&f.status, "status", "", "list only sagas with this `status`: in_flight, stuck or completed")
	fs.StringVar(&f.trusted, "trusted-keys", std.getenv("CHOREO_TRUSTED_KEYS"), "run: the services' `source=key,...` list (env CHOREO_TRUSTED_KEYS); when set, records the services refuse (bad signature, untrusted source, malformed) are recorded as refused, not indexed")
	fs.StringVar(&f.contracts, "contracts", contractsReference, "run: check observed payloads against the contracts of this catalogue `file` (JSON, as sagactl contracts writes it), \""+contractsReference+"\" (the reference saga's) or \"off\"")
	// The flags of one subcommand are defined for all, so that flags may come before the
	// subcommand; using one with another subcommand is a usage error (below).
	subFlags := map[string]string{"svg": "flow", "last": "flow", "asyncapi": "flow", "window": "usage", "catalogue": "usage", "retire": "usage", "trusted-keys": "run", "contracts": "run"}
	fs.StringVar(&f.svg, "svg", "", "flow: also write the graph as SVG to this `file`")
	fs.DurationVar(&f.last, "last", 0, "flow: compute it from the events of the last `window` only, in whole minutes (0: all)")
	fs.StringVar(&f.asyncapi, "asyncapi", "", "flow: also write an AsyncAPI 3.0.0 document (JSON) of the observed flow to this `file`")
	durationVar(fs, &f.usage.window, "window", 24*time.Hour, "usage: count the events published within this window")
	fs.StringVar(&f.usage.catalogue, "catalogue", contractsReference, "usage: what each service produces, consumes and accepts: a catalogue `file` (JSON, as sagactl contracts -o writes it), \"reference\" (the reference saga's) or \"off\"")
	fs.StringVar(&f.usage.retire, "retire", "", "usage: answer whether `type@version` can be retired, e.g. payment.authorized@1")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), trackUsage)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	// Flags may come before the subcommand too: "track -db URL list".
	if sub == "" && len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	if sub == "" {
		sub = "run"
	}
	var misplaced error
	fs.Visit(func(fl *flag.Flag) {
		if only := subFlags[fl.Name]; only != "" && only != sub && misplaced == nil {
			misplaced = fmt.Errorf("%w: -%s only applies to track %s", errUsage, fl.Name, only)
		}
	})
	if misplaced != nil {
		return misplaced
	}
	switch sub {
	case "run", "stuck", "list", "flow", "usage", "rejected", "observed":
		if len(pos) != 0 {
			return fmt.Errorf("%w: track %s takes no arguments, got %q", errUsage, sub, pos)
		}
	case "saga":
		if len(pos) != 1 {
			return fmt.Errorf("%w: track saga takes one correlation id", errUsage)
		}
	default:
		return fmt.Errorf("%w: unknown track subcommand %q (run, stuck, list, saga, flow, rejected, observed)", errUsage, sub)
	}
	switch f.status {
	case "", string(tracker.StatusInFlight), string(tracker.StatusStuck), string(tracker.StatusCompleted):
	default:
		return fmt.Errorf("%w: -status %q: want in_flight, stuck or completed", errUsage, f.status)
	}
	if sub != "run" && (f.dsn == "" || f.configs == "") {
		return fmt.Errorf("%w: %s", errUsage, trackerNeeded(sub))
	}
	cfg, err := loadTrackConfigs(f.configs)
	if err != nil {
		return err
	}
	if f.dsn == "" {
		return fmt.Errorf("%w: track needs -db or TRACKER_DATABASE_URL", errUsage)
	}
	pool, err := trackerPool(ctx, f.dsn, f.c.timeout)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := []tracker.Option{tracker.WithGroup(f.group), tracker.WithTable(f.table),
		tracker.WithRetention(f.retention), tracker.WithRefresh(f.refresh)}
	if f.trusted != "" {
		rules, err := trustRules(f.trusted)
		if err != nil {
			return err
		}
		opts = append(opts, tracker.WithTrust(rules))
	}
	if sub == "run" {
		if opts, err = withObservedContracts(opts, f.contracts); err != nil {
			return err
		}
	}
	tr, err := tracker.New(pool, cfg, opts...)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer tr.Close() //nolint:errcheck
	if err := tracker.Migrate(ctx, pool, f.table); err != nil {
		if isConnError(err) {
			return fmt.Errorf("%w: postgres: %w (is it running? set -db or DATABASE_URL)", errUnreachable, err)
		}
		return err
	}
	switch sub {
	case "run":
		return trackRun(ctx, tr, f, cfg, std)
	case "stuck":
		s, err := tr.Stuck(ctx)
		if err != nil {
			return err
		}
		return printStuck(s, f.c.json, std)
	case "list":
		s, err := tr.List(ctx, tracker.Status(f.status))
		if err != nil {
			return err
		}
		return printSagas(s, f.c.json, std)
	case "flow":
		return trackFlow(ctx, tr, f, std)
	case "rejected":
		rj, err := tr.Rejected(ctx, trackRejectedLimit)
		if err != nil {
			return err
		}
		return printRejected(rj, f.c.json, std)
	case "observed":
		vs, err := tr.ObservedViolations(ctx)
		if err != nil {
			return err
		}
		return printObserved(vs, f.c.json, std)
	case "usage":
		if f.usage.window <= 0 {
			return fmt.Errorf("%w: -window must be positive", errUsage)
		}
		return contractsUsage(ctx, tr, f, std)
	default:
		tl, err := tr.Saga(ctx, pos[0])
		if errors.Is(err, tracker.ErrNotFound) {
			return fmt.Errorf("%w: %w", errNotFound, err)
		}
		if err != nil {
			return err
		}
		return printTimeline(tl, f.c.json, std)
	}
}

// trackerNeeded says what a query of the tracker's index (track stuck|list|saga, flow)
// needs when it is given no index: a tracker that fills one, and where it is.
func trackerNeeded(sub string) string {
	cmd := "track " + sub
	if sub == "flow" {
		cmd = "flow"
	}
	return cmd + " reads the saga tracker's index, and no tracker is given: run \"DEMO_KEEP=1 make demo\" " +
		"(it starts one, and sagactl finds it), or start one with \"sagactl track -db URL -config deploy/tracker/order.json\" " +
		"and give " + cmd + " the same -db and -config (or TRACKER_DATABASE_URL and TRACKER_CONFIG)"
}

// trackerPool connects to the tracker's database at dsn.
func trackerPool(ctx context.Context, dsn string, timeout time.Duration) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The error would quote the URL, which may carry a password.
		return nil, fmt.Errorf("%w: the tracker's database is not a Postgres connection string", errUsage)
	}
	pcfg.ConnConfig.ConnectTimeout = timeout
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("sagactl: postgres: %w", err)
	}
	return pool, nil
}

// loadTrackConfigs reads and merges the comma-separated config files.
func loadTrackConfigs(files string) (tracker.Config, error) {
	var merged tracker.Config
	for file := range strings.SplitSeq(files, ",") {
		if file = strings.TrimSpace(file); file == "" {
			continue
		}
		c, err := tracker.LoadConfig(file)
		if err != nil {
			return merged, fmt.Errorf("%w: %w", errUsage, err)
		}
		for _, tp := range c.Topics {
			if !slices.Contains(merged.Topics, tp) {
				merged.Topics = append(merged.Topics, tp)
			}
		}
		merged.Sagas = append(merged.Sagas, c.Sagas...)
	}
	if len(merged.Sagas) == 0 {
		return merged, fmt.Errorf("%w: track needs -config with at least one saga declaration file", errUsage)
	}
	if err := merged.Validate(); err != nil {
		return merged, fmt.Errorf("%w: %w", errUsage, err)
	}
	return merged, nil
}

func trackRun(ctx context.Context, tr *tracker.Tracker, f trackFlags, cfg tracker.Config, std stdio) error {
	var brokers []string
	for b := range strings.SplitSeq(f.c.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return fmt.Errorf("%w: -brokers is empty", errUsage)
	}
	opts, _, err := f.c.clientOptions(brokers)
	if err != nil {
		return err
	}
	names := make([]string, len(cfg.Sagas))
	for i, s := range cfg.Sagas {
		names[i] = s.Name
	}
	fmt.Fprintf(std.out, "sagactl track: indexing %s into %s as group %s (sagas: %s)\n",
		strings.Join(tr.Topics(), ","), f.table, f.group, strings.Join(names, ", "))
	return tr.Run(ctx, brokers, opts...)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// describeWaiting says what a stuck saga waits for, as the CLI and the console print it.
func describeWaiting(w tracker.Waiting) string {
	return fmt.Sprintf("waiting for %s to answer %s with %s (step %q) since %s, deadline %s",
		orDash(w.Service), w.After.Type, strings.Join(w.Expected, "|"), w.Step, when(w.After.Time), when(w.Deadline))
}

func printJSON(v any, std stdio) error {
	enc := json.NewEncoder(std.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printStuck(s []tracker.Summary, asJSON bool, std stdio) error {
	if asJSON {
		return printJSON(s, std)
	}
	if len(s) == 0 {
		_, err := fmt.Fprintln(std.out, "no stuck sagas")
		return err
	}
	t := newTable("SAGA", "CORRELATION ID", "STEP", "WAITING FOR", "TO ANSWER", "WITH", "DEADLINE", "DLQ").right(7)
	for _, x := range s {
		w := x.Waiting
		t.add(x.Saga, x.CorrelationID, w.Step, orDash(w.Service), w.After.Type, strings.Join(w.Expected, "|"),
			when(w.Deadline), strconv.Itoa(x.DeadLetters))
	}
	return t.render(std.out)
}

func printSagas(s []tracker.Summary, asJSON bool, std stdio) error {
	if asJSON {
		return printJSON(s, std)
	}
	if len(s) == 0 {
		_, err := fmt.Fprintln(std.out, "no sagas")
		return err
	}
	t := newTable("SAGA", "CORRELATION ID", "STATUS", "STARTED", "ENDED", "LAST EVENT", "EVENTS", "DLQ").right(6, 7)
	for _, x := range s {
		t.add(x.Saga, x.CorrelationID, string(x.Status), when(x.Started), when(x.Ended), x.LastType,
			strconv.Itoa(x.Events), strconv.Itoa(x.DeadLetters))
	}
	return t.render(std.out)
}

func printTimeline(tl tracker.Timeline, asJSON bool, std stdio) error {
	if asJSON {
		return printJSON(tl, std)
	}
	for _, s := range tl.Sagas {
		line := fmt.Sprintf("%s saga %s: %s", s.Saga, tl.CorrelationID, s.Status)
		if w := s.Waiting; w != nil {
			line += ", " + describeWaiting(*w)
		}
		fmt.Fprintln(std.out, safeText(line))
	}
	t := newTable("TIME", "TYPE", "SOURCE", "TOPIC", "POSITION", "TRACE ID", "EVENT ID")
	for _, e := range tl.Events {
		t.add(e.Time.UTC().Format(time.RFC3339Nano), e.Type, e.Source, e.Topic,
			fmt.Sprintf("%d:%d", e.Partition, e.Offset), orDash(e.TraceID), e.ID)
	}
	if err := t.render(std.out); err != nil {
		return err
	}
	if len(tl.DeadLetters) == 0 {
		return nil
	}
	fmt.Fprintln(std.out, "\ndead letters:")
	d := newTable("TIME", "TYPE", "TOPIC", "POSITION", "REASON", "ERROR")
	for _, e := range tl.DeadLetters {
		d.add(e.Time.UTC().Format(time.RFC3339Nano), e.Type, e.Topic, fmt.Sprintf("%d:%d", e.Partition, e.Offset),
			orDash(e.Reason), orDash(e.Error))
	}
	return d.render(std.out)
}

// trustRules are the rules the reference services refuse records by: the saga's sources
// per event type (events.Trust) and the signature keys of list (CHOREO_TRUSTED_KEYS).
func trustRules(list string) (*consumer.Router, error) {
	keys, err := app.LoadTrustedKeys(list)
	if err != nil {
		return nil, fmt.Errorf("%w: -trusted-keys: %w", errUsage, err)
	}
	r := events.Trust(consumer.NewRouter().IgnoreUnknown())
	for source, set := range keys {
		r.TrustKeys(source, set)
	}
	return r, nil
}

// trackRejectedLimit bounds the rejected records `track rejected` lists.
const trackRejectedLimit = 100

func printRejected(rj tracker.Rejections, asJSON bool, std stdio) error {
	if asJSON {
		return printJSON(rj, std)
	}
	if _, err := fmt.Fprintf(std.out, "%d escaped, %d skipped, %d refused (kept for the retention age)\n", rj.Escaped, rj.Skipped, rj.Refused); err != nil {
		return err
	}
	if len(rj.Latest) == 0 {
		return nil
	}
	t := newTable("AT", "TOPIC", "PARTITION", "OFFSET", "ACTION", "DETAIL").right(2, 3)
	for _, r := range rj.Latest {
		t.add(when(r.At), r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10), r.Action, r.Detail)
	}
	return t.render(std.out)
}
