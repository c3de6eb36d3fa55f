package contract

import "errors"

// Sentinel errors.
var (
	// ErrInvalidSchema: a payload type has no JSON Schema (it is not a struct), or a
	// schema document does not compile. A programming error: retrying does not help.
	ErrInvalidSchema = errors.New("contract: invalid schema")
	// ErrInvalidCatalogue: a catalogue (a baseline file) is not valid JSON of the
	// catalogue's form, or a declaration in it is incomplete. Retrying does not help.
	ErrInvalidCatalogue = errors.New("contract: invalid catalogue")
)
