package consumer

import (
	"context"
	"fmt"

	"github.com/choreo-saga/choreo/event"
)

// Decode decodes the record into m.Event with event.FromRecord. A record that cannot be
// decoded fails with an error matching event.ErrMalformed, which is non-retryable: placed
// inside DeadLetter, such a record is dead-lettered at once.
func Decode(opts ...event.DecodeOption) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if err := decode(m, opts); err != nil {
				return err
			}
			return next(ctx, m)
		}
	}
}

// decode sets m.Event from m.Record unless m is decoded already. Decode and StandardBatch
// both call it, so a record fails to decode with the same error on either path.
func decode(m *Message, opts []event.DecodeOption) error {
	if m.Decoded {
		return nil
	}
	ev, err := event.FromRecord(m.Record, opts...)
	if err != nil {
		return fmt.Errorf("consumer: decode %s[%d]@%d: %w", m.Record.Topic, m.Record.Partition, m.Record.Offset, err)
	}
	m.Event, m.Decoded = ev, true
	return nil
}
