package migrate

import (
	"github.com/choreo-saga/choreo/internal/sqlname"
)

// The default table names, as the SQL files spell them.
const (
	defaultIdempotency = "choreo_idempotency"
	defaultOutbox      = "choreo_outbox"
	defaultFences      = "choreo_lock_fences"
	defaultDeadLetters = "choreo_dead_letters"
)

// OutboxMaxPartLen bounds each part of an outbox table name, so that the dead-letter
// table's name (the outbox table's plus "_dead") stays within sqlname.MaxPartLen.
const OutboxMaxPartLen = 48

// Idempotency is the idempotency records table t.
func Idempotency(t sqlname.Name) Component {
	return Component{kind: "idempotency", table: t, steps: load("idempotency",
		quote(defaultIdempotency+"_expires_at_idx"), t.Derived("_expires_at_idx"),
		quote(defaultIdempotency), t.Quoted())}
}

// Outbox is the outbox table t and its dead-letter table t_dead. t must be
// t.Plain(OutboxMaxPartLen); the outbox package checks it.
func Outbox(t sqlname.Name) Component {
	return Component{kind: "outbox", table: t, steps: load("outbox",
		quote(defaultOutbox+"_dead"), t.WithSuffix("_dead").Quoted(),
		quote(defaultOutbox), t.Quoted())}
}

// Fences is the lock package's fencing table, whose name is fixed.
func Fences() Component {
	return Component{kind: "lock_fences", table: sqlname.MustParse(defaultFences), steps: load("lock_fences")}
}

// DeadLetters is the dead-letter archive table t.
func DeadLetters(t sqlname.Name) Component {
	return Component{kind: "dead_letters", table: t, steps: load("dead_letters",
		quote(defaultDeadLetters), t.Quoted())}
}

func quote(s string) string { return `"` + s + `"` }
