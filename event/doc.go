// Package event defines choreo's event envelope and its Kafka wire format.
//
// An Event carries an id, a type, its source service, the subject (the entity id, which
// is also the Kafka key), a time, a payload schema version, the saga's correlation id, the
// causation id of the event that caused it, and a JSON payload.
//
// On the wire an event is a Kafka record in CloudEvents Kafka binary content mode: the
// record value is the payload and the envelope travels in ce_* headers (ce_id, ce_type,
// ce_source, ce_specversion, ce_time, ce_subject, and the extensions ce_correlationid,
// ce_causationid and ce_dataschemaversion). Any Kafka client in any language can read and
// write these records, as long as it reads the batch compression of the producer (the
// service kit's KAFKA_COMPRESSION, default gzip, which every stock client reads);
// docs/interop.md says what each client and CloudEvents SDK needs. W3C trace context headers (traceparent, tracestate, baggage) are
// added beside them by package tracing.
//
// ToRecord writes every attribute; FromRecord reads whatever the CloudEvents 1.0 spec
// allows other producers to send: ids that are not UUIDs, no subject (the record key is
// used) or correlation id (the subject is used, as New sets it), content types with parameters, and
// structured mode (application/cloudevents+json).
//
// Decoding untrusted records never panics; every error matches ErrMalformed, which marks
// input that no retry can fix, so a consumer can dead-letter it at once:
//
//	ev, err := event.FromRecord(rec)
//	if errors.Is(err, event.ErrMalformed) {
//		// send rec to the dead-letter topic with err.Error() as the reason
//	}
//
// This package is a leaf: it depends on no other choreo package.
package event
