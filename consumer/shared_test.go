package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// path is one of the two ways a StandardConfig handles records, with what it reported.
type path struct {
	spans   *tracetest.SpanRecorder
	logs    *bytes.Buffer
	metrics *sdkmetric.ManualReader
}

func newPath(cfg *StandardConfig) *path {
	p := &path{spans: tracetest.NewSpanRecorder(), logs: new(bytes.Buffer), metrics: sdkmetric.NewManualReader()}
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.metrics))
	cfg.Logger = slog.New(slog.NewJSONHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return p
}

// span returns the attributes of the consumer span of the record at offset, with its
// parent's span id.
func (p *path) span(t *testing.T, offset int64) (map[attribute.Key]attribute.Value, string) {
	t.Helper()
	for _, s := range p.spans.Ended() {
		if a := attrs(s); a["messaging.kafka.offset"].AsInt64() == offset && s.Name() == "process "+a["messaging.destination.name"].AsString() {
			return a, s.Parent().SpanID().String()
		}
	}
	t.Fatalf("no consumer span for offset %d", offset)
	return nil, ""
}

// logLine returns the log line of the record at offset, without its time and duration.
func (p *path) logLine(t *testing.T, offset int64) map[string]any {
	t.Helper()
	for line := range bytes.Lines(p.logs.Bytes()) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["offset"] == float64(offset) {
			delete(m, "time")
			delete(m, "duration")
			return m
		}
	}
	t.Fatalf("no log line for offset %d in %s", offset, p.logs)
	return nil
}

// outcomeSets returns the attribute sets the outcome counter was recorded with.
func (p *path) outcomeSets(t *testing.T) map[attribute.Distinct]attribute.Set {
	t.Helper()
	out := make(map[attribute.Distinct]attribute.Set)
	for _, dp := range collect(t, p.metrics)[MetricOutcomes].Data.(metricdata.Sum[int64]).DataPoints {
		out[dp.Attributes.Equivalent()] = dp.Attributes
	}
	return out
}

// A record handled in a batch (StandardBatch) and alone (Standard) gets the same span,
// log line and metric attributes, and a record that cannot be handled fails with the
// same error on both paths: both are built from one resolved config and its parts.
func TestStandardBatchSharesStandardParts(t *testing.T) {
	e := newChainEnv(t, 1)
	prop := propagation.TraceContext{}
	insert := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, 0)`, ev.ID, ev.Subject)
		return err
	}
	base := StandardConfig{
		DB: e.pool, DeadLetter: e.producer,
		Router: NewRouter().Handle("test.step", insert).Ignore("test.noise"),
		Locker: e.locker, Fence: true, EntityAttribute: "order.id", Propagator: prop,
		Retry: RetryConfig{MaxAttempts: 1},
	}
	singleCfg, batchCfg := base, base
	singleCfg.Name, batchCfg.Name = "single", "batch" // each path claims the events once
	single, batched := newPath(&singleCfg), newPath(&batchCfg)
	standard, err := Standard(singleCfg)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := StandardBatch(batchCfg)
	if err != nil {
		t.Fatal(err)
	}

	// Records with a producer span in their headers, at distinct offsets.
	tp := sdktrace.NewTracerProvider()
	pctx, producer := tp.Tracer("test").Start(context.Background(), "send")
	producer.End()
	var offset int64
	record := func(r *kgo.Record) *kgo.Record {
		offset++
		r.Offset = offset
		prop.Inject(pctx, tracing.RecordCarrier{Record: r})
		return r
	}
	step := func(key string) *kgo.Record {
		return record(eventRecord(t, e.topic, "test.step", key, seqPayload{Seq: 1}))
	}
	ctx := context.Background()
	msg := func(r *kgo.Record) *Message { return &Message{Record: r, Group: e.group, deadLetterTopic: e.dlqOf} }

	// Handled, and ignored, records: same span attributes, log fields and metric attributes.
	rec, noise, other := step("o-1"), record(eventRecord(t, e.topic, "test.noise", "o-2", nil)), step("o-3")
	for _, r := range []*kgo.Record{rec, noise} {
		if err := standard(ctx, msg(r)); err != nil {
			t.Fatalf("Standard: %v", err)
		}
	}
	if err := batch(ctx, []*Message{msg(other), msg(rec), msg(noise)}); err != nil {
		t.Fatalf("StandardBatch: %v", err)
	}
	for _, r := range []*kgo.Record{rec, noise} {
		sa, sp := single.span(t, r.Offset)
		ba, bp := batched.span(t, r.Offset)
		if !maps.Equal(sa, ba) {
			t.Errorf("offset %d: span attributes differ:\nStandard      %v\nStandardBatch %v", r.Offset, sa, ba)
		}
		if sp != producer.SpanContext().SpanID().String() || bp != sp {
			t.Errorf("offset %d: parents %s and %s, want the producer span %s", r.Offset, sp, bp, producer.SpanContext().SpanID())
		}
		if sl, bl := single.logLine(t, r.Offset), batched.logLine(t, r.Offset); !maps.Equal(sl, bl) {
			t.Errorf("offset %d: log lines differ:\nStandard      %v\nStandardBatch %v", r.Offset, sl, bl)
		}
	}
	a, _ := single.span(t, rec.Offset)
	for k, want := range map[attribute.Key]string{"order.id": "o-1", tracing.AttrCorrelationID: "o-1", "choreo.outcome": "handled", "choreo.event.type": "test.step"} {
		if got := a[k].Emit(); got != want {
			t.Errorf("span %s = %q, want %q", k, got, want)
		}
	}
	if a, _ := single.span(t, noise.Offset); a["choreo.outcome"].Emit() != "ignored" {
		t.Errorf("ignored record's outcome %q", a["choreo.outcome"].Emit())
	}
	if s, b := single.outcomeSets(t), batched.outcomeSets(t); !maps.EqualFunc(s, b, func(x, y attribute.Set) bool { return x.Equals(&y) }) || len(s) != 2 {
		t.Errorf("outcome metric attributes differ:\nStandard      %v\nStandardBatch %v", s, b)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM effects`); n != 3 {
		t.Errorf("%d effects, want 3 (one per path and event)", n)
	}

	// Records that cannot be handled: the batch fails with the error Standard
	// dead-letters them with.
	undecodable := record(&kgo.Record{Topic: e.topic, Key: []byte("o-4"), Value: []byte(`{}`)})
	unknown := record(eventRecord(t, e.topic, "test.unknown", "o-5", seqPayload{Seq: 1}))
	for _, tt := range []struct {
		r    *kgo.Record
		want error
	}{{undecodable, event.ErrMalformed}, {unknown, ErrUnknownType}} {
		if err := standard(ctx, msg(tt.r)); err != nil {
			t.Fatalf("Standard: %v", err)
		}
		line := single.logLine(t, tt.r.Offset)
		berr := batch(ctx, []*Message{msg(step("o-6")), msg(tt.r)})
		if !errors.Is(berr, tt.want) {
			t.Fatalf("StandardBatch: %v, want %v", berr, tt.want)
		}
		if line["outcome"] != "dead_lettered" || line["error"] != berr.Error() {
			t.Errorf("offset %d: Standard dead-lettered it (%v) with %q; StandardBatch failed with %q",
				tt.r.Offset, line["outcome"], line["error"], berr)
		}
	}
}
