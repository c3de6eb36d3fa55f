package app

// ConsumerSpec and Consume let the external tests start a consumer group of their own
// on an App (the kit's one path is On).
type ConsumerSpec = consumerSpec

func (a *App) Consume(spec ConsumerSpec) error { return a.consume(spec) }
