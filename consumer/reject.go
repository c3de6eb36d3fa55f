package consumer

import "errors"

// rejectError is the error Reject returns.
type rejectError struct {
	reason string
	err    error
}

func (e *rejectError) Error() string { return e.err.Error() }
func (e *rejectError) Unwrap() error { return e.err }

// Reject is the error a business handler returns for an event it refuses after deciding
// what the refusal does: the writes it made in the transaction commit (e.g. the
// cancellation of an order that a forged event tried to move), its AfterCommit functions
// run, and the event is then dead-lettered with reason as its HeaderDLQReason (Reason
// returns it), never retried. reason is a short snake_case word: ReasonMismatch for an
// event that fails a business cross-check, or the service's own ("no_shipment"; sagactl
// accepts a reason it finds in the dead-letter topic besides those Reasons lists); an
// empty one is ReasonPermanent.
//
// The commit applies to a handler that Idempotent or Standard runs for one record. In a
// StandardBatch transaction the rejection rolls the batch back like any error, and the
// records are handled again one at a time, where the rejecting one commits and is
// dead-lettered alone. Outside such a transaction it is a non-retryable error with its
// own reason.
//
// The refusal is stored with the event's idempotency record: if the dead-letter topic
// refuses the copy (ErrDeadLetter), the redelivered record is a duplicate that is
// refused again, without calling the handler, so its copy is produced then; the
// refusal's writes and effects happen once.
//
// The result matches err with errors.Is and errors.As. Reject(reason, nil) is nil.
func Reject(reason string, err error) error {
	if err == nil {
		return nil
	}
	if reason == "" {
		reason = ReasonPermanent
	}
	return &rejectError{reason: reason, err: err}
}

// rejected returns the reason of a Reject error in err's chain.
func rejected(err error) (string, bool) {
	var r *rejectError
	if errors.As(err, &r) {
		return r.reason, true
	}
	return "", false
}
