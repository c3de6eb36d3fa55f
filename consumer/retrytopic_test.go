package consumer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
)

func TestMessageTopic(t *testing.T) {
	for _, c := range []struct{ topic, group, want string }{
		{"orders.events", "payment", "orders.events"},
		{"orders.events.retry.payment", "payment", "orders.events"},
		{"orders.events.retry.payment", "inventory", "orders.events.retry.payment"}, // another group's
		{"orders.events.retry.payment", "", "orders.events.retry.payment"},
		{".retry.payment", "payment", ".retry.payment"},
	} {
		m := &Message{Record: &kgo.Record{Topic: c.topic}, Group: c.group}
		if got := m.Topic(); got != c.want {
			t.Errorf("Topic of %s in group %q = %s, want %s", c.topic, c.group, got, c.want)
		}
	}
	if got := RetryTopic("orders.events", "payment"); got != "orders.events.retry.payment" {
		t.Errorf("RetryTopic = %s", got)
	}
}

func TestWithRetryTopicsInvalidGroup(t *testing.T) {
	h := func(context.Context, *Message) error { return nil }
	for _, group := range []string{"pay ment", "pay/ment", "é", strings.Repeat("g", 240)} {
		if _, err := New([]string{"127.0.0.1:1"}, group, []string{"orders.events"}, h, WithRetryTopics()); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("group %q: %v, want ErrInvalidConfig", group, err)
		}
		if _, err := New([]string{"127.0.0.1:1"}, group, []string{"orders.events"}, h); err != nil {
			t.Errorf("group %q without retry topics: %v", group, err)
		}
	}
}

// A consumer with retry topics fails at start when one is missing, naming it (and not
// the ones that exist), and never creates it.
func TestConsumerMissingRetryTopic(t *testing.T) {
	brokers := testenv.Kafka(t)
	src := testenv.Topic(t, brokers, 1)
	other := testenv.Topic(t, brokers, 1)
	group := testenv.Name(t, "g")
	createTopic(t, brokers, RetryTopic(other, group), nil)
	c, err := New(brokers, group, []string{src, other}, func(context.Context, *Message) error { return nil },
		fastGroup(), WithRetryTopics())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, ErrMissingTopic) || !strings.Contains(err.Error(), "retry topic(s) "+RetryTopic(src, group)+" of group") ||
		strings.Contains(err.Error(), RetryTopic(other, group)) {
		t.Fatalf("Run: %v; want ErrMissingTopic naming %s only", err, RetryTopic(src, group))
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when its context ended")
	}
}

// TestRetryTopicConsumed runs the standard chain with WithRetryTopics: a record on the
// group's retry topic is handled as a record of its topic (a Trust rule naming the
// topic accepts it), and a poison record there is dead-lettered to the topic's
// dead-letter topic, naming the retry topic as its origin. Another group of the topic,
// without the record on its own retry topic, never sees either.
func TestRetryTopicConsumed(t *testing.T) {
	e := newChainEnv(t, 1)
	retry := RetryTopic(e.topic, e.group)
	createTopic(t, e.brokers, retry, nil)
	createTopic(t, e.brokers, DeadLetterTopic(e.topic), nil)
	otherGroup := testenv.Name(t, "other")
	createTopic(t, e.brokers, RetryTopic(e.topic, otherGroup), nil)

	var (
		mu      sync.Mutex
		handled = map[string][]string{} // group -> keys
	)
	router := func(group string) *Router {
		return NewRouter().Handle("payment.authorized", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			mu.Lock()
			defer mu.Unlock()
			handled[group] = append(handled[group], ev.Subject)
			return nil
		}).Trust("payment", e.topic, "payment.authorized")
	}
	for _, g := range []string{e.group, otherGroup} {
		h := e.standard(t, StandardConfig{Router: router(g), Name: "h"})
		c, err := New(e.brokers, g, []string{e.topic}, h, fastGroup(), WithRetryTopics(), WithDeadLetterTopicCheck())
		if err != nil {
			t.Fatal(err)
		}
		start(t, c)
	}

	ev, err := event.New("payment", "payment.authorized", "o-1", map[string]string{"order_id": "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	good, err := event.ToRecord(retry, ev)
	if err != nil {
		t.Fatal(err)
	}
	poison := &kgo.Record{Topic: retry, Key: []byte("o-2"), Value: []byte("{")}
	produce(t, e.producer, good, poison)

	waitFor(t, "the retry topic's records settled", func() bool { return committed(t, e.brokers, e.group, retry)[0] == 2 })
	mu.Lock()
	got := append([]string(nil), handled[e.group]...)
	other := len(handled[otherGroup])
	mu.Unlock()
	if len(got) != 1 || got[0] != "o-1" {
		t.Errorf("group handled %v from its retry topic, want [o-1] (trusted as a record of %s)", got, e.topic)
	}
	if other != 0 {
		t.Errorf("the other group handled %d records of a retry topic it does not own", other)
	}
	dl := readTopic(t, e.brokers, DeadLetterTopic(e.topic), 1)[0]
	m := &Message{Record: dl}
	if string(dl.Key) != "o-2" || m.Header(HeaderDLQTopic) != retry || m.Header(HeaderDLQGroup) != e.group ||
		m.Header(HeaderDLQReason) != ReasonMalformed || m.Header(HeaderDLQOffset) != "1" {
		t.Errorf("dead letter %s: topic %q group %q reason %q offset %q; want the poison record from %s",
			dl.Key, m.Header(HeaderDLQTopic), m.Header(HeaderDLQGroup), m.Header(HeaderDLQReason), m.Header(HeaderDLQOffset), retry)
	}
}
