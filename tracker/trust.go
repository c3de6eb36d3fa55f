package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// WithTrust makes the tracker refuse what the services refuse: a record of a saga topic
// is indexed only if it decodes as an event (event.FromRecord) and passes r's Trust,
// TrustKeys and Subjects rules, the rules the services' routers apply before a handler
// runs (see consumer.Router.Filter). A refused record is not indexed, so it never
// changes a saga's status, stuck list, flow or versions: it is recorded as a Rejection
// with ActionRefused and the reason (consumer.Reason: bad_signature, untrusted,
// malformed), counted in choreo.tracker.events.refused and logged. r's routes do not
// matter (a type it does not route is not refused). Dead-letter records are copies the
// services already refused or gave up on, and are indexed as they are. Give the
// tracker the same rules and keys as the services, e.g. a router built by the same
// function with the keys of CHOREO_TRUSTED_KEYS.
func WithTrust(r *consumer.Router) Option {
	return func(o *options) error {
		if r == nil {
			return fmt.Errorf("%w: nil trust router", ErrInvalidConfig)
		}
		o.admit = r.Filter()(func(context.Context, *consumer.Message) error { return nil })
		return nil
	}
}

// refusal returns the Rejection of rec, a record of a saga topic, when the trust rules
// (WithTrust) refuse it, or nil.
func (t *Tracker) refusal(ctx context.Context, rec *kgo.Record) *Rejection {
	if t.admit == nil {
		return nil
	}
	ev, err := event.FromRecord(rec)
	if err == nil {
		err = t.admit(ctx, &consumer.Message{Record: rec, Event: ev, Decoded: true})
		if errors.Is(err, consumer.ErrUnknownType) {
			err = nil
		}
	}
	if err == nil {
		return nil
	}
	return &Rejection{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Action: ActionRefused,
		Detail: consumer.Reason(err) + ": " + err.Error()}
}
