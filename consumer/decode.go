package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/event"
)

// Decoder turns a fetched record into an event. The default is event.FromRecord
// (CloudEvents, binary or structured mode); set StandardConfig.Decoder for producers that
// do not write CloudEvents at all. Its errors are poison: whatever it returns is
// dead-lettered at once with reason "malformed", and the event it returns must pass
// event.Event.Validate.
type Decoder func(r *kgo.Record) (event.Event, error)

// decodeRecord decodes the record into m.Event with event.FromRecord. A record that cannot be
// decoded fails with an error matching event.ErrMalformed, which is non-retryable: placed
// inside DeadLetter, such a record is dead-lettered at once. StandardConfig.decodeRecord sets
// other limits.
func decodeRecord() Middleware {
	return decodeWith(event.FromRecord)
}

// decodeWith is Decode with any Decoder.
func decodeWith(d Decoder) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if err := decode(m, d); err != nil {
				return err
			}
			return next(ctx, m)
		}
	}
}

// cloudEvents is the default Decoder: an event.Decoder with opts.
func cloudEvents(opts []event.DecodeOption) (Decoder, error) {
	d, err := event.NewDecoder(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return d.Decode, nil
}

// validated makes d's events pass event.Event.Validate (event.FromRecord validates its
// own).
func validated(d Decoder) Decoder {
	return func(r *kgo.Record) (event.Event, error) {
		ev, err := d(r)
		if err == nil {
			err = ev.Validate()
		}
		return ev, err
	}
}

// decode sets m.Event from m.Record with d unless m is decoded already. Decode and
// StandardBatch both call it, so a record fails to decode with the same error on either
// path. Every error matches event.ErrMalformed, or ErrBatchTooLarge for the record that
// stands for a batch the client did not decompress (WithMaxRecordBytes), and so is never
// retried.
func decode(m *Message, d Decoder) error {
	if m.Decoded {
		return nil
	}
	if err := batchTooLarge(m.Record); err != nil {
		return err
	}
	ev, err := d(m.Record)
	if err != nil {
		if !errors.Is(err, event.ErrMalformed) {
			err = fmt.Errorf("%w: %w", event.ErrMalformed, err)
		}
		return fmt.Errorf("consumer: decode %s[%d]@%d: %w", m.Record.Topic, m.Record.Partition, m.Record.Offset, err)
	}
	m.Event, m.Decoded = ev, true
	return nil
}
