package tracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/choreo-saga/choreo/contract"
)

// WithContracts makes the tracker check every observed payload against the contracts of
// c: an indexed event whose (type, version) c declares is validated against the schema
// of its producers (what they promise to write) and of every consumer (what it accepts).
// Each schema it breaks is recorded as a Violation (Violations, ObservedViolations,
// Timeline.Violations) and counted in choreo.tracker.contract.violations. A violation
// never changes a saga's status: the event is indexed as any other. Dead letters are
// not checked (they are copies), nor types c does not declare. An empty catalogue is an
// error.
func WithContracts(c contract.Catalogue) Option {
	return func(o *options) error {
		chk, err := newChecker(c)
		if err != nil {
			return fmt.Errorf("%w: contracts: %w", ErrInvalidConfig, err)
		}
		o.contracts = chk
		return nil
	}
}

// checker holds, per declared (type, version), its distinct schemas with the services
// that declare each: services sharing a payload type share a schema, validated once.
type checker struct {
	keys    map[contract.Key][]sharedSchema
	sources map[string]bool // the declared services: the source label's values
}

type sharedSchema struct {
	schema  *contract.Schema
	readers []reader
}

// reader is a service declaring a schema, in a role.
type reader struct {
	service string
	role    contract.Role
}

func newChecker(c contract.Catalogue) (*checker, error) {
	if len(c.Declarations) == 0 {
		return nil, fmt.Errorf("empty catalogue")
	}
	chk := &checker{keys: map[contract.Key][]sharedSchema{}, sources: map[string]bool{}}
	for _, d := range c.Declarations {
		chk.sources[d.Service] = true
		shared := chk.keys[d.Key()]
		i := slices.IndexFunc(shared, func(s sharedSchema) bool { return bytes.Equal(s.schema.JSON(), compact(d.Schema)) })
		if i < 0 {
			s, err := contract.ParseSchema(d.Schema)
			if err != nil {
				return nil, fmt.Errorf("%s %s %s: %w", d.Service, d.Role, d.Key(), err)
			}
			shared, i = append(shared, sharedSchema{schema: s}), len(shared)
		}
		shared[i].readers = append(shared[i].readers, reader{d.Service, d.Role})
		chk.keys[d.Key()] = shared
	}
	return chk, nil
}

// compact returns doc as compact JSON (as contract.Schema.JSON holds it), or doc.
func compact(doc []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return doc
	}
	return b.Bytes()
}

// check returns the violations of e's payload, data.
func (c *checker) check(e entry, data []byte, now time.Time) []Violation {
	var out []Violation
	for _, s := range c.keys[contract.Key{Type: e.typ, Version: e.version}] {
		err := s.schema.Validate(data)
		if err == nil {
			continue
		}
		for _, r := range s.readers {
			out = append(out, Violation{Topic: e.topic, Partition: e.partition, Offset: e.offset,
				Source: e.source, Type: e.typ, Version: e.version, Service: r.service, Role: r.role,
				CorrelationID: e.corr, Detail: err.Error(), At: now})
		}
	}
	return out
}

// Violation is an observed event whose payload breaks the schema a service declares for
// its (type, version) (WithContracts).
type Violation struct {
	Topic     string
	Partition int32
	Offset    int64
	Source    string        // ce_source: who produced it
	Type      string        // ce_type
	Version   int           // its schema version
	Service   string        // the service whose declared schema it breaks
	Role      contract.Role // contract.Consumes: the consumer refuses it; contract.Produces: its producer broke its promise
	// CorrelationID is the event's saga.
	CorrelationID string
	Detail        string // where the payload breaks the schema
	At            time.Time
}

// ViolationCount is the number of violations of one (source, type, version) against one
// service's schema, with the latest.
type ViolationCount struct {
	Source  string
	Type    string
	Version int
	Service string
	Role    contract.Role
	Count   int64
	Latest  Violation
}

func (t *Tracker) violationsTable() string { return t.table + "_violations" }

const violationCols = `topic, partition, "offset", source, type, version, service, role, correlation_id, detail, at`

func scanViolation(row pgx.CollectableRow) (Violation, error) {
	var v Violation
	err := row.Scan(&v.Topic, &v.Partition, &v.Offset, &v.Source, &v.Type, &v.Version, &v.Service, &v.Role,
		&v.CorrelationID, &v.Detail, &v.At)
	v.At = v.At.UTC()
	return v, err
}

// ObservedViolations returns the violations kept (retention deletes them with the events),
// counted per source, type, version and service, most frequent first.
func (t *Tracker) ObservedViolations(ctx context.Context) ([]ViolationCount, error) {
	const group = `PARTITION BY source, type, version, service, role`
	rows, err := t.db.Query(ctx, `SELECT c, `+violationCols+` FROM (
		SELECT *, row_number() OVER (`+group+` ORDER BY at DESC, topic, partition, "offset") AS n,
			count(*) OVER (`+group+`) AS c FROM `+t.violationsTable()+`) v
		WHERE n = 1 ORDER BY c DESC, type, version, source, service, role`)
	if err != nil {
		return nil, fmt.Errorf("tracker: violations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ViolationCount, error) {
		var c ViolationCount
		v := &c.Latest
		err := row.Scan(&c.Count, &v.Topic, &v.Partition, &v.Offset, &v.Source, &v.Type, &v.Version, &v.Service,
			&v.Role, &v.CorrelationID, &v.Detail, &v.At)
		v.At = v.At.UTC()
		c.Source, c.Type, c.Version, c.Service, c.Role = v.Source, v.Type, v.Version, v.Service, v.Role
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("tracker: violations: %w", err)
	}
	return out, nil
}

// sagaViolations returns the violations of the events of one saga, in time order.
func (t *Tracker) sagaViolations(ctx context.Context, correlationID string) ([]Violation, error) {
	rows, err := t.db.Query(ctx, `SELECT `+violationCols+` FROM `+t.violationsTable()+
		` WHERE correlation_id = $1 ORDER BY at, topic, partition, "offset", service, role`, correlationID)
	if err != nil {
		return nil, fmt.Errorf("tracker: saga violations: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanViolation)
	if err != nil {
		return nil, fmt.Errorf("tracker: saga violations: %w", err)
	}
	return out, nil
}

// recordViolations stores vs (a record already checked is left as it is), then counts
// and logs those it added.
func (t *Tracker) recordViolations(ctx context.Context, vs []Violation) error {
	if len(vs) == 0 {
		return nil
	}
	var (
		topics, services, roles, sources, types, corrs, details []string
		parts, versions                                         []int32
		offsets                                                 []int64
	)
	for _, v := range vs {
		detail, _ := storable(v.Detail, MaxErrorBytes)
		topics, parts, offsets = append(topics, v.Topic), append(parts, v.Partition), append(offsets, v.Offset)
		services, roles, sources = append(services, v.Service), append(roles, string(v.Role)), append(sources, v.Source)
		types, versions = append(types, v.Type), append(versions, int32(v.Version))
		corrs, details = append(corrs, v.CorrelationID), append(details, detail)
	}
	rows, err := t.db.Query(ctx, `INSERT INTO `+t.violationsTable()+` (topic, partition, "offset", service, role,
		source, type, version, correlation_id, detail)
		SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::integer[], $9::text[], $10::text[])
		ON CONFLICT (topic, partition, "offset", service, role) DO NOTHING
		RETURNING `+violationCols, topics, parts, offsets, services, roles, sources, types, versions, corrs, details)
	if err != nil {
		return fmt.Errorf("tracker: record %d contract violations: %w", len(vs), err)
	}
	added, err := pgx.CollectRows(rows, scanViolation)
	if err != nil {
		return fmt.Errorf("tracker: record %d contract violations: %w", len(vs), err)
	}
	for _, v := range added {
		source := v.Source
		if !t.contracts.sources[source] { // bound the label: any text may be a ce_source
			source = "undeclared"
		}
		t.inst.violations.Add(ctx, 1, metric.WithAttributes(attribute.String("source", source),
			attribute.String("type", v.Type), attribute.String("version", strconv.Itoa(v.Version)),
			attribute.String("consumer", v.Service), attribute.String("role", string(v.Role))))
		t.log.LogAttrs(ctx, slog.LevelWarn, "tracker: payload breaks a declared contract",
			slog.String("topic", v.Topic), slog.Int("partition", int(v.Partition)), slog.Int64("offset", v.Offset),
			slog.String("source", v.Source), slog.String("type", v.Type), slog.Int("version", v.Version),
			slog.String("service", v.Service), slog.String("role", string(v.Role)),
			slog.String("correlation_id", v.CorrelationID), slog.String("detail", v.Detail))
	}
	return nil
}
