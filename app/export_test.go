package app

// ConsumerSpec and Consume let the external tests start a consumer group of their own
// on an App (the kit's one path is On).
type ConsumerSpec = consumerSpec

func (a *App) Consume(spec ConsumerSpec) error { return a.consume(spec) }

// Defaults the external tests compare with.
var KafkaCompressions = kafkaCompressions

const (
	DefaultIdleTimeout = defaultIdleTimeout
	DefaultMaxConns    = defaultMaxConns
)

// Steps of New and Run the external tests drive one at a time.
var (
	EnsureDatabase   = ensureDatabase
	PruneDeadLetters = pruneDeadLetters
	RequireHost      = requireHost
)
