package tracker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Status is where a saga stands.
type Status string

// The statuses of a saga.
const (
	// StatusInFlight is a saga that has started, has not ended, and has no expectation
	// past its window.
	StatusInFlight Status = "in_flight"
	// StatusStuck is a saga that has not ended and has an expectation past its window.
	StatusStuck Status = "stuck"
	// StatusCompleted is a saga that has seen one of its terminal types.
	StatusCompleted Status = "completed"
)

// Event is one indexed event.
type Event struct {
	Topic       string    // Kafka topic it was read from
	Partition   int32     // its partition
	Offset      int64     // its offset
	ID          string    // ce_id
	Type        string    // ce_type
	Source      string    // ce_source: the producing service
	Subject     string    // ce_subject
	Time        time.Time // ce_time (the record's timestamp when absent)
	TraceID     string    // the trace id of its traceparent header, or ""
	CausationID string    // ce_causationid
}

// DeadLetter is a dead-lettered record joined to its saga by correlation id.
type DeadLetter struct {
	Event
	Reason string // choreo_dlq_reason
	Error  string // choreo_dlq_error
}

// Waiting names what a stuck saga waits for.
type Waiting struct {
	Step     string    // the step's name (its After pattern unless named)
	After    Event     // the event that opened the window
	Expected []string  // the type patterns that would answer
	Service  string    // the service expected to answer: the observed producer of a matching type, else the declared one
	Deadline time.Time // when the window closed
}

// Summary is one saga: a declared kind of saga for one correlation id.
type Summary struct {
	CorrelationID string
	Saga          string    // the declared saga's Name
	Status        Status    // where it stands now
	Started       time.Time // time of its first start event
	Ended         time.Time // time of its terminal event; zero unless completed
	LastType      string    // type of its latest event
	Events        int       // events indexed for it
	DeadLetters   int       // dead letters with its correlation id
	Waiting       *Waiting  // set when stuck
}

// Timeline is everything indexed under one correlation id, in event time order.
type Timeline struct {
	CorrelationID string
	Sagas         []Summary    // one per declared saga the events started
	Events        []Event      // every event, in time order
	DeadLetters   []DeadLetter // its dead letters, in time order
	Violations    []Violation  // its events' contract violations (WithContracts), in time order
}

const selectCols = `topic, partition, "offset", correlation_id, event_id, type, source, subject,
	event_time, trace_id, causation_id, dead_letter, dlq_reason, dlq_error, indexed_at`

func scanEntry(rows pgx.CollectableRow) (entry, error) {
	var e entry
	err := rows.Scan(&e.topic, &e.partition, &e.offset, &e.corr, &e.id, &e.typ, &e.source, &e.subject,
		&e.at, &e.traceID, &e.causation, &e.dead, &e.reason, &e.errText, &e.indexed)
	e.at = e.at.UTC()
	return e, err
}

func (e entry) event() Event {
	return Event{Topic: e.topic, Partition: e.partition, Offset: e.offset, ID: e.id, Type: e.typ,
		Source: e.source, Subject: e.subject, Time: e.at, TraceID: e.traceID, CausationID: e.causation}
}

// sources returns the latest observed source of every event type.
func (t *Tracker) sources(ctx context.Context) (map[string]string, error) {
	rows, err := t.db.Query(ctx, `SELECT type, source FROM `+t.typesTable())
	if err != nil {
		return nil, fmt.Errorf("tracker: sources: %w", err)
	}
	m := map[string]string{}
	var typ, src string
	_, err = pgx.ForEachRow(rows, []any{&typ, &src}, func() error { m[typ] = src; return nil })
	if err != nil {
		return nil, fmt.Errorf("tracker: sources: %w", err)
	}
	return m, nil
}

// evaluate judges the sagas of one correlation id; entries are in time order.
func (t *Tracker) evaluate(corr string, entries []entry, srcs map[string]string, now time.Time) []Summary {
	var events []entry
	dead := 0
	for _, e := range entries {
		if e.dead {
			dead++
		} else {
			events = append(events, e)
		}
	}
	var out []Summary
	for _, s := range t.cfg.Sagas {
		start := slices.IndexFunc(events, func(e entry) bool { return matchAny(s.Start, e.typ) })
		if start < 0 {
			continue
		}
		evs := events[start:]
		sum := Summary{CorrelationID: corr, Saga: s.Name, Status: StatusInFlight, Started: evs[0].at,
			LastType: evs[len(evs)-1].typ, Events: len(evs), DeadLetters: dead}
		if i := slices.IndexFunc(evs, func(e entry) bool { return matchAny(s.Terminal, e.typ) }); i >= 0 && len(s.Terminal) > 0 {
			sum.Status, sum.Ended = StatusCompleted, evs[i].at
			out = append(out, sum)
			continue
		}
		for _, st := range s.Steps {
			i := lastIndex(evs, func(e entry) bool { return matchAny([]string{st.After}, e.typ) })
			if i < 0 || slices.ContainsFunc(evs[i+1:], func(e entry) bool { return matchAny(st.Expect, e.typ) }) {
				continue
			}
			deadline := evs[i].at.Add(time.Duration(st.Within))
			if !now.After(deadline) {
				continue
			}
			if sum.Waiting == nil || deadline.Before(sum.Waiting.Deadline) {
				sum.Waiting = &Waiting{Step: st.stepName(), After: evs[i].event(), Expected: st.Expect,
					Service: serviceFor(st, srcs), Deadline: deadline}
			}
		}
		if sum.Waiting != nil {
			sum.Status = StatusStuck
		}
		out = append(out, sum)
	}
	return out
}

func lastIndex(es []entry, f func(entry) bool) int {
	for i := len(es) - 1; i >= 0; i-- {
		if f(es[i]) {
			return i
		}
	}
	return -1
}

// serviceFor names who should answer st: the observed producer of a type matching its
// Expect patterns (the lexically first such type, for a stable answer), else the declared Service.
func serviceFor(st Step, srcs map[string]string) string {
	types := make([]string, 0, len(srcs))
	for typ := range srcs {
		if matchAny(st.Expect, typ) {
			types = append(types, typ)
		}
	}
	if len(types) == 0 {
		return st.Service
	}
	slices.Sort(types)
	return srcs[types[0]]
}

// Filter selects the sagas Find returns.
type Filter struct {
	Status Status // only sagas with this status; "" for all
	Saga   string // only sagas of this declared kind; "" for all
	Limit  int    // at most this many; 0 for no bound
}

// Find returns the sagas f selects: stuck ones by deadline, the one whose window closed
// first first; the others by start time, oldest first. It reads the saga summaries the
// tracker keeps at ingest, through their indexes, so a bounded Filter reads a bounded
// number of rows.
func (t *Tracker) Find(ctx context.Context, f Filter) ([]Summary, error) {
	args := []any{t.now()}
	where := []string{"true"}
	switch f.Status {
	case "":
	case StatusCompleted:
		where = append(where, "s.ended IS NOT NULL")
	case StatusStuck:
		where = append(where, "s.ended IS NULL", "s.deadline < $1")
	case StatusInFlight:
		where = append(where, "s.ended IS NULL", "(s.deadline IS NULL OR s.deadline >= $1)")
	default:
		return nil, fmt.Errorf("%w: unknown status %q", ErrInvalidConfig, f.Status)
	}
	if f.Saga != "" {
		args = append(args, f.Saga)
		where = append(where, fmt.Sprintf("s.saga = $%d", len(args)))
	}
	order := "s.started, s.correlation_id, s.saga"
	if f.Status == StatusStuck {
		order = "s.deadline, s.correlation_id, s.saga"
	}
	q := `SELECT s.correlation_id, s.saga, s.started, s.ended, s.last_type, s.events, s.dead_letters,
		CASE WHEN s.ended IS NOT NULL THEN 'completed' WHEN s.deadline < $1 THEN 'stuck' ELSE 'in_flight' END, s.deadline, s.step, s.expected, s.service,
		coalesce(e.topic, ''), coalesce(e.partition, 0), coalesce(e."offset", 0), coalesce(e.event_id, ''),
		coalesce(e.type, ''), coalesce(e.source, ''), coalesce(e.subject, ''), coalesce(e.event_time, s.started),
		coalesce(e.trace_id, ''), coalesce(e.causation_id, '')
		FROM ` + t.sagasTable() + ` s LEFT JOIN ` + t.table + ` e
		ON s.deadline IS NOT NULL AND e.topic = s.after_topic AND e.partition = s.after_partition AND e."offset" = s.after_offset
		WHERE ` + strings.Join(where, " AND ") + ` ORDER BY ` + order
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := t.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("tracker: find: %w", err)
	}
	var srcs map[string]string
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Summary, error) {
		var (
			s               Summary
			ended, deadline *time.Time
			w               Waiting
		)
		err := r.Scan(&s.CorrelationID, &s.Saga, &s.Started, &ended, &s.LastType, &s.Events, &s.DeadLetters,
			&s.Status, &deadline, &w.Step, &w.Expected, &w.Service,
			&w.After.Topic, &w.After.Partition, &w.After.Offset, &w.After.ID, &w.After.Type, &w.After.Source,
			&w.After.Subject, &w.After.Time, &w.After.TraceID, &w.After.CausationID)
		s.Started = s.Started.UTC()
		if ended != nil {
			s.Ended = ended.UTC()
		}
		if s.Status == StatusStuck && deadline != nil {
			w.Deadline, w.After.Time = deadline.UTC(), w.After.Time.UTC()
			s.Waiting = &w
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("tracker: find: %w", err)
	}
	for _, s := range out {
		if s.Waiting == nil {
			continue
		}
		if srcs == nil {
			if srcs, err = t.sources(ctx); err != nil {
				return nil, err
			}
		}
		s.Waiting.Service = serviceFor(Step{Expect: s.Waiting.Expected, Service: s.Waiting.Service}, srcs)
	}
	return out, nil
}

// List returns every saga with the given status ("" for all), ordered as Find orders
// them. Use Find with a Limit to bound the answer.
func (t *Tracker) List(ctx context.Context, status Status) ([]Summary, error) {
	return t.Find(ctx, Filter{Status: status})
}

// Stuck returns the stuck sagas, the one whose window closed first first.
func (t *Tracker) Stuck(ctx context.Context) ([]Summary, error) {
	return t.Find(ctx, Filter{Status: StatusStuck})
}

// Count is how many sagas of one declared kind stand at each status.
type Count struct {
	Saga      string
	InFlight  int64
	Stuck     int64
	Completed int64
	// Since is the start of the earliest of these sagas: the counts cover the sagas
	// started since then that retention has kept.
	Since time.Time
}

// Counts counts the sagas by kind and status, in the order of the declarations (a kind
// with no saga counts zero), then any kind indexed under a declaration since removed.
// It reads the unended sagas (in flight or stuck), the per-kind totals the summary
// table's triggers keep (completed is the total less the unended, from the same snapshot)
// and each kind's earliest start through an index: its work grows with the unended sagas
// and the kinds, not with the sagas kept.
func (t *Tracker) Counts(ctx context.Context) ([]Count, error) {
	rows, err := t.db.Query(ctx, `SELECT k.saga, coalesce(u.in_flight, 0), coalesce(u.stuck, 0),
		k.total - coalesce(u.in_flight + u.stuck, 0),
		(SELECT min(s.started) FROM `+t.sagasTable()+` s WHERE s.saga = k.saga)
		FROM `+t.sagaTotalsTable()+` k LEFT JOIN (
			SELECT saga, count(*) FILTER (WHERE deadline IS NULL OR deadline >= $1) AS in_flight,
				count(*) FILTER (WHERE deadline < $1) AS stuck
			FROM `+t.sagasTable()+` WHERE ended IS NULL GROUP BY saga
		) u ON u.saga = k.saga
		WHERE k.total > 0 ORDER BY k.saga`, t.now())
	if err != nil {
		return nil, fmt.Errorf("tracker: counts: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Count, error) {
		var (
			c     Count
			since *time.Time
		)
		err := r.Scan(&c.Saga, &c.InFlight, &c.Stuck, &c.Completed, &since)
		if since != nil {
			c.Since = since.UTC()
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("tracker: counts: %w", err)
	}
	out := make([]Count, 0, len(t.cfg.Sagas))
	for _, s := range t.cfg.Sagas {
		c := Count{Saga: s.Name}
		if i := slices.IndexFunc(found, func(f Count) bool { return f.Saga == s.Name }); i >= 0 {
			c = found[i]
			found = slices.Delete(found, i, i+1)
		}
		out = append(out, c)
	}
	return append(out, found...), nil
}

// stuckBySteps counts the stuck sagas per kind and waiting step.
func (t *Tracker) stuckBySteps(ctx context.Context) (map[stepKey]int64, error) {
	rows, err := t.db.Query(ctx, `SELECT saga, step, count(*) FROM `+t.sagasTable()+
		` WHERE ended IS NULL AND deadline < $1 GROUP BY saga, step`, t.now())
	if err != nil {
		return nil, fmt.Errorf("tracker: stuck by step: %w", err)
	}
	out := map[stepKey]int64{}
	var (
		k stepKey
		n int64
	)
	_, err = pgx.ForEachRow(rows, []any{&k.saga, &k.step, &n}, func() error { out[k] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("tracker: stuck by step: %w", err)
	}
	return out, nil
}

// Saga returns the timeline of one correlation id: its sagas, events and dead letters.
// It returns ErrNotFound when nothing is indexed under it.
func (t *Tracker) Saga(ctx context.Context, correlationID string) (Timeline, error) {
	rows, err := t.db.Query(ctx, `SELECT `+selectCols+` FROM `+t.table+
		` WHERE correlation_id = $1 ORDER BY event_time, topic, partition, "offset"`, correlationID)
	if err != nil {
		return Timeline{}, fmt.Errorf("tracker: saga: %w", err)
	}
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return Timeline{}, fmt.Errorf("tracker: saga: %w", err)
	}
	if len(entries) == 0 {
		return Timeline{}, fmt.Errorf("%w: %q", ErrNotFound, correlationID)
	}
	srcs, err := t.sources(ctx)
	if err != nil {
		return Timeline{}, err
	}
	tl := Timeline{CorrelationID: correlationID, Sagas: t.evaluate(correlationID, entries, srcs, t.now())}
	for _, e := range entries {
		if e.dead {
			tl.DeadLetters = append(tl.DeadLetters, DeadLetter{Event: e.event(), Reason: e.reason, Error: e.errText})
		} else {
			tl.Events = append(tl.Events, e.event())
		}
	}
	if tl.Violations, err = t.sagaViolations(ctx, correlationID); err != nil {
		return Timeline{}, err
	}
	return tl, nil
}
