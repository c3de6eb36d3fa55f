package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/tracker"
)

// prefillOffset is where the prefilled events' Kafka offsets start: far above the
// offsets the benchmark then produces on the same topics, so none of its events collides
// with a prefilled position (the index's primary key) and is taken for a redelivery.
const prefillOffset = 1_000_000_000_000

// sagaKind is one way an order saga of the prefill goes, with how many of every 1,000
// sagas go that way. Its events are steps, in order; dead, when >= 0, is the step whose
// record was also dead-lettered (a copy on its topic's ".dlq"). A kind that does not end
// waits on the declared step waiting: stuck, or in flight when it started in the last
// seconds.
type sagaKind struct {
	name     string
	per1000  int // of the sagas before the last seconds; 0: an in-flight kind
	steps    []string
	dead     int
	waiting  string // the declared step it waits on; "" when it ended
	inFlight bool   // started within the last seconds, its window still open
}

// sagaKinds mirror the reference saga: 92.5% confirmed (4 events), declines, stock
// shortages refunded, cancellations, and 1% stuck on each of its first three steps
// (those on "reserve stock" with the authorization dead-lettered by inventory). The
// sagas of the last seconds are in flight on those steps.
var sagaKinds = []sagaKind{
	{name: "confirmed", per1000: 925, dead: -1, steps: []string{events.OrderCreated, events.PaymentAuthorized, events.StockReserved, events.OrderConfirmed}},
	{name: "declined", per1000: 40, dead: -1, steps: []string{events.OrderCreated, events.PaymentDeclined, events.OrderRejected}},
	{name: "unavailable", per1000: 15, dead: -1, steps: []string{events.OrderCreated, events.PaymentAuthorized, events.StockUnavailable, events.PaymentRefunded, events.OrderRejected}},
	{name: "cancelled", per1000: 10, dead: -1, steps: []string{events.OrderCreated, events.PaymentAuthorized, events.StockReserved,
		events.OrderCancelRequested, events.StockReleased, events.PaymentRefunded, events.OrderCancelled}},
	{name: "stuck on charge", per1000: 4, dead: -1, waiting: "charge", steps: []string{events.OrderCreated}},
	{name: "stuck on stock", per1000: 3, dead: 1, waiting: "reserve stock", steps: []string{events.OrderCreated, events.PaymentAuthorized}},
	{name: "stuck on confirm", per1000: 3, dead: -1, waiting: "confirm", steps: []string{events.OrderCreated, events.PaymentAuthorized, events.StockReserved}},
	{name: "in flight on charge", inFlight: true, dead: -1, waiting: "charge", steps: []string{events.OrderCreated}},
	{name: "in flight on stock", inFlight: true, dead: -1, waiting: "reserve stock", steps: []string{events.OrderCreated, events.PaymentAuthorized}},
	{name: "in flight on confirm", inFlight: true, dead: -1, waiting: "confirm", steps: []string{events.OrderCreated, events.PaymentAuthorized, events.StockReserved}},
}

// records is how many index rows a saga of kind k has: its events and its dead letter.
func (k sagaKind) records() int {
	if k.dead >= 0 {
		return len(k.steps) + 1
	}
	return len(k.steps)
}

// prefillPlan is how many sagas make n records: the in-flight ones (one per 10,000, at
// least 10), the others in the proportions of sagaKinds.
func prefillPlan(n int) (sagas, inFlight int) {
	per1000 := 0
	for _, k := range sagaKinds {
		per1000 += k.per1000 * k.records()
	}
	sagas = int(float64(n) * 1000 / float64(per1000))
	return sagas, max(10, sagas/10_000)
}

// prefilled is what prefill wrote.
type prefilled struct {
	events, sagas, stuck, inFlight int64
	took                           time.Duration
}

// prefill fills the tracker's index in db (migrated, empty) with about n records of
// order sagas, as the tracker would have indexed them (see sagaKinds): their events and
// dead letters, one summary per saga, the producers of each type and version, every
// event's place in the flow (tallied per minute by the table's triggers) and the
// fingerprint of the declarations the index is built for, so that Run does not rebuild it. Sagas start
// evenly over the retention window before now (less an hour, so that retention deletes
// none while the benchmark runs); their event ids and correlation ids are UUIDv7 of their
// times, as the reference services make them; payment.authorized is at version 2 for half
// of the sagas of the last two days and all of the last day. The rows are written by
// INSERT … SELECT from generate_series, the secondary indexes built after them, then the
// tables vacuumed and analyzed as autovacuum would have.
func prefill(ctx context.Context, pool *pgxpool.Pool, cfg tracker.Config, n, partitions int, now time.Time, retention time.Duration) (prefilled, error) {
	start := time.Now()
	topicOf, err := topicsByService(cfg.Topics)
	if err != nil {
		return prefilled{}, err
	}
	if len(cfg.Sagas) == 0 {
		return prefilled{}, fmt.Errorf("no saga declared")
	}
	saga := cfg.Sagas[0]
	steps := map[string]tracker.Step{}
	for _, st := range saga.Steps {
		steps[st.Name] = st
	}
	sagas, inFlight := prefillPlan(n)
	var rows, kinds, inFlightKinds []string
	lo := 0 // the share of the kinds before k, of 1,000
	for ki, k := range sagaKinds {
		klo, khi := lo, lo+k.per1000
		if k.inFlight {
			klo, khi = -1, -1
			inFlightKinds = append(inFlightKinds, quote(k.name))
		}
		lo += k.per1000
		last := len(k.steps) - 1
		indexed := fmt.Sprintf("%d", last) // the step whose row was indexed last
		if k.dead >= 0 {
			indexed = fmt.Sprintf("%d", k.dead)
		}
		summary := []string{fmt.Sprint(ki), quote(k.name), fmt.Sprint(klo), fmt.Sprint(khi), fmt.Sprint(len(k.steps)),
			fmt.Sprint(k.records() - len(k.steps)), fmt.Sprint(last), quote(k.steps[last]), indexed}
		if k.waiting == "" {
			if !slices.Contains(saga.Terminal, k.steps[last]) {
				return prefilled{}, fmt.Errorf("kind %q ends on %s, not a terminal type of saga %q", k.name, k.steps[last], saga.Name)
			}
			summary = append(summary, "true", "''", "'{}'::text[]", "''", "0", "''")
		} else {
			st, ok := steps[k.waiting]
			if !ok || st.After != k.steps[last] {
				return prefilled{}, fmt.Errorf("kind %q: saga %q has no step %q after %s", k.name, saga.Name, k.waiting, k.steps[last])
			}
			summary = append(summary, "false", quote(st.Name), "ARRAY["+quoteAll(st.Expect)+"]::text[]", quote(st.Service),
				fmt.Sprint(time.Duration(st.Within).Microseconds()), quote(topicOf[service(k.steps[last])]))
		}
		kinds = append(kinds, "("+strings.Join(summary, ", ")+")")
		for i, typ := range k.steps {
			rows = append(rows, fmt.Sprintf("(%d, %d, %d, %s, %s, %s, false)", ki, i, i, quote(topicOf[service(typ)]), quote(typ), quote(service(typ))))
		}
		if k.dead >= 0 {
			typ := k.steps[k.dead]
			rows = append(rows, fmt.Sprintf("(%d, %d, %d, %s, %s, %s, true)", ki, len(k.steps), k.dead,
				quote(topicOf[service(typ)]+tracker.DLQSuffix), quote(typ), quote(service(typ))))
		}
	}
	if lo != 1000 || len(inFlightKinds) == 0 {
		return prefilled{}, fmt.Errorf("the kinds' shares add up to %d of 1,000, with %d in-flight kinds", lo, len(inFlightKinds))
	}
	events, sagasT, flowT := tracker.DefaultTable, tracker.DefaultTable+"_sagas", tracker.DefaultTable+"_flow_events"
	// s: one row per saga, computed once (OFFSET 0 keeps the planner from computing it per
	// record): its number g, kind, start st (whole milliseconds, st_ms since the epoch), gap
	// between its events (ms), partition, UUIDv7 correlation id, trace id and the random
	// part of its event ids. Records join it by kind; a record's time is that of the step
	// it copies (a dead letter copies one), its indexed_at a little later.
	sagaRows := fmt.Sprintf(`WITH kinds(kind, name, lo, hi, events, dead, last, last_type, indexed_step, ended, step,
			expected, service, within_us, after_topic) AS (VALUES %[1]s),
		steps(kind, i, copy_of, topic, type, source, dead) AS (VALUES %[2]s),
		s AS (
			SELECT g, k.*, st, st_ms, (20 + (g * 7919) %% 180) AS gap, (g %% %[3]d) AS part, md5('trace' || g) AS trace,
				md5('event' || g) AS er,
				substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8' || substr(r, 4, 3) || '-' || substr(r, 7, 12) AS corr
			FROM generate_series(1::bigint, %[4]d) g -- bigint: g * 7919 passes 2^31 from 271,000 sagas
			CROSS JOIN LATERAL (SELECT date_trunc('milliseconds', CASE WHEN g > %[4]d - %[5]d
				THEN $1::timestamptz - interval '20 seconds' + (g - (%[4]d - %[5]d) - 1) * (interval '15 seconds' / %[5]d)
				ELSE $1::timestamptz - $2::interval + interval '1 hour' + (g - 1) * (($2::interval - interval '1 hour 1 minute') / greatest(%[4]d - %[5]d, 1))
				END)) AS a(st)
			CROSS JOIN LATERAL (SELECT (extract(epoch FROM st) * 1000)::bigint) AS m(st_ms)
			CROSS JOIN LATERAL (SELECT lpad(to_hex(st_ms), 12, '0'), md5('corr' || g)) AS b(h, r)
			JOIN kinds k ON CASE WHEN g > %[4]d - %[5]d THEN k.name = (ARRAY[%[6]s])[1 + g %% %[7]d]
				ELSE (g * 389) %% 1000 >= k.lo AND (g * 389) %% 1000 < k.hi END
			OFFSET 0
		)`, strings.Join(kinds, ", "), strings.Join(rows, ", "), partitions, sagas, inFlight,
		strings.Join(inFlightKinds, ", "), len(inFlightKinds))
	offsetMs := func(step string) string { // the time of a step of saga s, in ms after its start
		return fmt.Sprintf(`(%[1]s * s.gap + (s.g + %[1]s) %% 7)`, step)
	}
	at := func(step string) string { return `(s.st + ` + offsetMs(step) + ` * interval '1 millisecond')` }
	eventID := func(step string) string { // UUIDv7 of the step's time, unique per saga and step
		h := `lpad(to_hex(s.st_ms + ` + offsetMs(step) + `), 12, '0')`
		return fmt.Sprintf(`substr(%[1]s, 1, 8) || '-' || substr(%[1]s, 9, 4) || '-7' || to_hex(%[2]s) || substr(s.er, 1, 2) || '-9' ||
			substr(s.er, 3, 3) || '-' || substr(s.er, 6, 12)`, h, step)
	}
	insertEvents := sagaRows + fmt.Sprintf(`
		INSERT INTO %[1]s (topic, partition, "offset", correlation_id, event_id, type, source, subject, event_time,
			trace_id, causation_id, dead_letter, dlq_reason, dlq_error, indexed_at, schema_version)
		SELECT e.topic, s.part, %[2]d + s.g * 8 + e.i, s.corr, %[3]s, e.type, e.source, s.corr, %[4]s,
			s.trace, CASE WHEN e.copy_of = 0 THEN '' ELSE %[5]s END, e.dead,
			CASE WHEN e.dead THEN 'retries_exhausted' ELSE '' END,
			CASE WHEN e.dead THEN 'inventory: reserve stock: timeout: context deadline exceeded' ELSE '' END,
			%[4]s + CASE WHEN e.dead THEN interval '2 seconds' ELSE interval '5 milliseconds' END,
			CASE WHEN e.type = 'payment.authorized' AND (s.st > $1::timestamptz - interval '1 day'
				OR s.st > $1::timestamptz - interval '2 days' AND s.g %% 2 = 0) THEN 2 ELSE 1 END
		FROM s JOIN steps e ON e.kind = s.kind`, events, prefillOffset, eventID("e.copy_of"), at("e.copy_of"), eventID("(e.copy_of - 1)"))
	insertSagas := sagaRows + fmt.Sprintf(`
		INSERT INTO %[1]s (correlation_id, saga, started, ended, last_type, last_at, events, dead_letters, seen,
			deadline, step, expected, service, after_topic, after_partition, after_offset, indexed)
		SELECT s.corr, %[2]s, %[3]s, CASE WHEN s.ended THEN %[4]s END, s.last_type, %[4]s, s.events, s.dead,
			s.events + s.dead, CASE WHEN NOT s.ended THEN %[4]s + s.within_us * interval '1 microsecond' END,
			s.step, s.expected, s.service, s.after_topic, CASE WHEN s.ended THEN 0 ELSE s.part END,
			CASE WHEN s.ended THEN 0 ELSE %[5]d + s.g * 8 + s.last END,
			%[6]s + CASE WHEN s.dead > 0 THEN interval '2 seconds' ELSE interval '5 milliseconds' END
		FROM s`, sagasT, quote(saga.Name), at("0"), at("s.last"), prefillOffset, at("s.indexed_step"))
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return prefilled{}, err
	}
	defer conn.Release()
	// The secondary indexes go while the rows are written and come back with Migrate.
	var drop []string
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(format('%I.%I', schemaname, indexname)), '{}') FROM pg_indexes i
		WHERE tablename = ANY($1) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)`,
		[]string{events, sagasT, flowT}).Scan(&drop)
	if err != nil {
		return prefilled{}, fmt.Errorf("prefill: indexes: %w", err)
	}
	for _, q := range append([]string{`SET maintenance_work_mem = '256MB'`}, drop...) {
		if !strings.HasPrefix(q, "SET") {
			q = "DROP INDEX " + q
		}
		if _, err := conn.Exec(ctx, q); err != nil {
			return prefilled{}, fmt.Errorf("prefill: %s: %w", q, err)
		}
	}
	for _, q := range []string{insertEvents, insertSagas} {
		if _, err := conn.Exec(ctx, q, now, retention); err != nil {
			return prefilled{}, fmt.Errorf("prefill: %w", err)
		}
	}
	if err := tracker.Migrate(ctx, conn, ""); err != nil {
		return prefilled{}, err
	}
	tr, err := tracker.New(pool, cfg)
	if err != nil {
		return prefilled{}, err
	}
	defer tr.Close() //nolint:errcheck
	fingerprint, err := tr.Fingerprint()
	if err != nil {
		return prefilled{}, err
	}
	for _, q := range []string{
		// Every distinct event's place in the flow, as ingest computes it (the first copy of
		// an event id; its causation event, else the one before it), with the latest
		// indexed_at and the row count of its correlation id; the table's triggers tally it.
		`SET work_mem = '64MB'`,
		`INSERT INTO ` + flowT + ` (correlation_id, event_id, type, source, topic, event_time, first, from_type,
			caused, gap_us, indexed, seen)
		WITH ev AS (SELECT DISTINCT ON (correlation_id, event_id) correlation_id, event_id, type, source, topic,
				event_time, causation_id, partition, "offset"
			FROM ` + events + ` WHERE NOT dead_letter
			ORDER BY correlation_id, event_id, event_time, topic, partition, "offset"),
		seq AS (SELECT *, lag(type) OVER w AS prev_type, lag(event_time) OVER w AS prev_time,
				row_number() OVER w AS n
			FROM ev WINDOW w AS (PARTITION BY correlation_id ORDER BY event_time, topic, partition, "offset")),
		corr AS (SELECT correlation_id, max(indexed_at) AS indexed, count(*) AS seen FROM ` + events + ` GROUP BY correlation_id)
		SELECT s.correlation_id, s.event_id, s.type, s.source, s.topic, s.event_time, s.n = 1,
			coalesce(c.type, s.prev_type), c.type IS NOT NULL,
			(extract(epoch FROM s.event_time - coalesce(c.event_time, s.prev_time)) * 1000000)::bigint,
			k.indexed, k.seen
		FROM seq s LEFT JOIN ev c ON s.causation_id <> '' AND c.correlation_id = s.correlation_id
			AND c.event_id = s.causation_id
		JOIN corr k ON k.correlation_id = s.correlation_id`,
		`RESET work_mem`,
		// The index is built for the declarations, as Rebuild records it.
		`INSERT INTO ` + events + `_meta (key, value) VALUES ('rebuilt_for', ` + quote(fingerprint) + `)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
		// The producers of every type and version, as Rebuild records them.
		`INSERT INTO ` + events + `_versions (type, version, source, first_seen, last_seen)
			SELECT type, schema_version, source, min(event_time), max(event_time) FROM ` + events + `
			WHERE NOT dead_letter GROUP BY 1, 2, 3`,
		`INSERT INTO ` + events + `_types (type, source, last_seen)
			SELECT DISTINCT ON (type) type, source, last_seen FROM ` + events + `_versions ORDER BY type, last_seen DESC`,
		`VACUUM ANALYZE ` + events, `VACUUM ANALYZE ` + sagasT, `VACUUM ANALYZE ` + events + `_versions`,
		`VACUUM ANALYZE ` + events + `_types`, `VACUUM ANALYZE ` + flowT, `VACUUM ANALYZE ` + events + `_flow_edges`,
		`VACUUM ANALYZE ` + events + `_flow_nodes`,
		`CHECKPOINT`, // the fill's writes are flushed before anything is measured
		`RESET maintenance_work_mem`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return prefilled{}, fmt.Errorf("prefill: %w", err)
		}
	}
	var p prefilled
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+events+`), count(*),
		count(*) FILTER (WHERE ended IS NULL AND deadline < $1), count(*) FILTER (WHERE ended IS NULL AND deadline >= $1)
		FROM `+sagasT, now).Scan(&p.events, &p.sagas, &p.stuck, &p.inFlight)
	p.took = time.Since(start)
	return p, err
}

// topicsByService maps each reference service to its topic among topics.
func topicsByService(topics []string) (map[string]string, error) {
	topicOf := map[string]string{}
	for _, t := range topics {
		switch {
		case strings.HasPrefix(t, "orders"):
			topicOf[events.SourceOrder] = t
		case strings.HasPrefix(t, "payments"):
			topicOf[events.SourcePayment] = t
		case strings.HasPrefix(t, "inventory"):
			topicOf[events.SourceInventory] = t
		}
	}
	if len(topicOf) != 3 {
		return nil, fmt.Errorf("the config's topics %v lack the orders, payments or inventory topic", topics)
	}
	return topicOf, nil
}

// service is the reference service that produces event type typ.
func service(typ string) string {
	switch {
	case strings.HasPrefix(typ, "payment."):
		return events.SourcePayment
	case strings.HasPrefix(typ, "stock."):
		return events.SourceInventory
	default:
		return events.SourceOrder
	}
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// quoteAll is ss as a list of SQL string literals.
func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}
