package tracker

import (
	"context"
	"fmt"
	"slices"
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
}

const selectCols = `topic, partition, "offset", correlation_id, event_id, type, source, subject,
	event_time, trace_id, causation_id, dead_letter, dlq_reason, dlq_error`

func scanEntry(rows pgx.CollectableRow) (entry, error) {
	var e entry
	err := rows.Scan(&e.topic, &e.partition, &e.offset, &e.corr, &e.id, &e.typ, &e.source, &e.subject,
		&e.at, &e.traceID, &e.causation, &e.dead, &e.reason, &e.errText)
	e.at = e.at.UTC()
	return e, err
}

func (e entry) event() Event {
	return Event{Topic: e.topic, Partition: e.partition, Offset: e.offset, ID: e.id, Type: e.typ,
		Source: e.source, Subject: e.subject, Time: e.at, TraceID: e.traceID, CausationID: e.causation}
}

// sources returns the latest observed source of every event type.
func (t *Tracker) sources(ctx context.Context) (map[string]string, error) {
	rows, err := t.db.Query(ctx, `SELECT DISTINCT ON (type) type, source FROM `+t.table+
		` WHERE NOT dead_letter AND source <> '' ORDER BY type, event_time DESC`)
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

// List returns the sagas with the given status ("" for all), ordered by start time,
// oldest first. It reads the whole index: size the retention accordingly.
func (t *Tracker) List(ctx context.Context, status Status) ([]Summary, error) {
	srcs, err := t.sources(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := t.db.Query(ctx, `SELECT `+selectCols+` FROM `+t.table+
		` ORDER BY correlation_id, event_time, topic, partition, "offset"`)
	if err != nil {
		return nil, fmt.Errorf("tracker: list: %w", err)
	}
	defer rows.Close()
	now := t.now()
	var (
		out   []Summary
		group []entry
	)
	flush := func() {
		if len(group) == 0 {
			return
		}
		for _, s := range t.evaluate(group[0].corr, group, srcs, now) {
			if status == "" || s.Status == status {
				out = append(out, s)
			}
		}
		group = group[:0]
	}
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, fmt.Errorf("tracker: list: %w", err)
		}
		if len(group) > 0 && group[0].corr != e.corr {
			flush()
		}
		group = append(group, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tracker: list: %w", err)
	}
	flush()
	slices.SortStableFunc(out, func(a, b Summary) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// Stuck returns the stuck sagas, the one whose window closed first first.
func (t *Tracker) Stuck(ctx context.Context) ([]Summary, error) {
	out, err := t.List(ctx, StatusStuck)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Summary) int { return a.Waiting.Deadline.Compare(b.Waiting.Deadline) })
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
	return tl, nil
}
