package tracing_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/tracing"
)

// Send and process spans carry the OTel messaging semantic-convention
// attributes and form one parent chain across a real broker round trip.
func TestKafkaSpansFollowMessagingConventions(t *testing.T) {
	brokers, topic := kafkaTopic(t)
	tp, rec := newRecorder(t)
	k := tracing.NewKafka(tracing.WithTracerProvider(tp))

	ev, err := event.New("order", "order.created", "o-7", map[string]int{"qty": 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := event.ToRecord(topic, ev)
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.WithEntity(tracing.WithCorrelationID(context.Background(), "o-7"), "order.id", "o-7")
	ctx, send := k.StartSend(ctx, r)
	res := kafkaClient(t, brokers).ProduceSync(ctx, r)
	tracing.EndSend(send, r, res.FirstErr())
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	got := consumeOne(t, kafkaClient(t, brokers, kgo.ConsumeTopics(topic)))
	pctx, process := k.StartProcess(context.Background(), got, "payment")
	process.End()

	if got := tracing.CorrelationID(pctx); got != "o-7" {
		t.Errorf("correlation id after extract = %q, want o-7 (from baggage)", got)
	}

	s := spanNamed(t, rec, "send "+topic)
	p := spanNamed(t, rec, "process "+topic)
	if s.SpanKind() != trace.SpanKindProducer || p.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds = %v/%v, want producer/consumer", s.SpanKind(), p.SpanKind())
	}
	if p.Parent().SpanID() != s.SpanContext().SpanID() || p.SpanContext().TraceID() != s.SpanContext().TraceID() {
		t.Errorf("process span is not the child of the send span")
	}
	off := strconv.FormatInt(got.Offset, 10)
	for _, tc := range []struct {
		span string
		got  map[string]string
		want map[string]string
	}{
		{"send", attrs(s), map[string]string{
			"messaging.system":                   "kafka",
			"messaging.destination.name":         topic,
			"messaging.operation.type":           "send",
			"messaging.operation.name":           "send",
			"messaging.destination.partition.id": "0",
			"messaging.kafka.offset":             off,
			"messaging.message.id":               ev.ID,
			"messaging.kafka.message.key":        "o-7",
			tracing.AttrCorrelationID:            "o-7",
			"order.id":                           "o-7",
		}},
		{"process", attrs(p), map[string]string{
			"messaging.system":                   "kafka",
			"messaging.destination.name":         topic,
			"messaging.operation.type":           "process",
			"messaging.operation.name":           "process",
			"messaging.destination.partition.id": "0",
			"messaging.kafka.offset":             off,
			"messaging.consumer.group.name":      "payment",
			"messaging.message.id":               ev.ID,
			"messaging.kafka.message.key":        "o-7",
			tracing.AttrCorrelationID:            "o-7",
		}},
	} {
		for key, want := range tc.want {
			if tc.got[key] != want {
				t.Errorf("%s span %s = %q, want %q", tc.span, key, tc.got[key], want)
			}
		}
	}
}

func TestEndSendRecordsError(t *testing.T) {
	tp, rec := newRecorder(t)
	r := &kgo.Record{Topic: "t"}
	_, span := tracing.NewKafka(tracing.WithTracerProvider(tp)).StartSend(context.Background(), r)
	tracing.EndSend(span, r, errors.New("broker said no"))
	s := spanNamed(t, rec, "send t")
	if s.Status().Code != codes.Error || s.Status().Description != "broker said no" {
		t.Fatalf("status = %+v, want error", s.Status())
	}
	if _, ok := attrs(s)["messaging.kafka.offset"]; ok {
		t.Fatal("failed send has an offset attribute")
	}
	if (tracing.RecordCarrier{Record: r}).Get("traceparent") == "" {
		t.Fatal("StartSend did not inject traceparent")
	}
}
