package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/tracing"
)

// TestIDsOnlyWithoutExporter runs one saga hop through real Postgres, Redis
// and a Kafka-protocol broker with the telemetry Setup builds when no
// exporter is configured: no span is recorded, yet every span has ids, the
// trace id travels in the record's traceparent to the consumer, and every log
// line names the trace and span it was written in.
func TestIDsOnlyWithoutExporter(t *testing.T) {
	cleanEnv(t)
	tel := setup(t)
	if tel.RecordsSpans {
		t.Fatal("RecordsSpans = true without an exporter")
	}
	inst := []tracing.InstrumentOption{tracing.WithTracerProvider(tel.TracerProvider), tracing.WithMeterProvider(tel.MeterProvider), tracing.WithPropagator(tel.Propagator)}
	pool, err := newPool(t, inst...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb, ns := testenv.Redis(t)
	if err := tracing.InstrumentRedis(rdb, inst...); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&logs, nil)))
	brokers, topic := kafkaTopic(t)
	producer := kafkaClient(t, brokers)
	k := tracing.NewKafka(inst...)

	// The producing side: a handler span, its transaction and a Redis
	// command, then the send span of the event it publishes.
	ctx := tracing.WithEntity(tracing.WithCorrelationID(context.Background(), "o-9"), "order.id", "o-9")
	ctx, handler := tel.TracerProvider.Tracer("t").Start(ctx, "handler")
	hsc := handler.SpanContext()
	if !hsc.IsValid() || handler.IsRecording() || hsc.IsSampled() {
		t.Fatalf("handler span %v recording %v: want valid ids, not recorded, not sampled", hsc, handler.IsRecording())
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, ns+"k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	logger.InfoContext(ctx, "handled")
	r := &kgo.Record{Topic: topic, Key: []byte("o-9"), Value: []byte(`{}`)}
	sctx, send := k.StartSend(ctx, r)
	if err := producer.ProduceSync(sctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tracing.EndSend(send, r, nil)
	handler.End()
	ssc := send.SpanContext()
	if ssc.TraceID() != hsc.TraceID() || ssc.SpanID() == hsc.SpanID() {
		t.Fatalf("send span %v: want the handler's trace %s with a span id of its own", ssc, hsc.TraceID())
	}
	want := "00-" + hsc.TraceID().String() + "-" + ssc.SpanID().String() + "-00"
	if got := (tracing.RecordCarrier{Record: r}).Get("traceparent"); got != want {
		t.Fatalf("traceparent = %q, want %q", got, want)
	}

	// The consuming side, on the record read back from the broker.
	consumer := kafkaClient(t, brokers, kgo.ConsumeTopics(topic))
	got := consumeOne(t, consumer)
	pctx, process := k.StartProcess(context.Background(), got, "g")
	defer process.End()
	psc := process.SpanContext()
	if psc.TraceID() != hsc.TraceID() || process.IsRecording() || !trace.SpanContextFromContext(pctx).Equal(psc) {
		t.Fatalf("process span %v recording %v: want trace %s, not recorded", psc, process.IsRecording(), hsc.TraceID())
	}
	logger.InfoContext(pctx, "consumed")

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	wantSpans := []string{hsc.SpanID().String(), psc.SpanID().String()}
	if len(lines) != len(wantSpans) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(wantSpans), logs.String())
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["trace_id"] != hsc.TraceID().String() || rec["span_id"] != wantSpans[i] {
			t.Errorf("log line %d = %s: want trace_id %s span_id %s", i, line, hsc.TraceID(), wantSpans[i])
		}
	}
}
