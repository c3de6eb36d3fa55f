package consumer

// Route is one routed event type and the topic it is routed from.
type Route struct {
	Type  string // the event type
	Topic string // the topic HandleOn limited it to; "" when routed with Handle, from any topic
}

// Routes returns the routed event types with their topics, sorted by type: what a
// consumer of this router handles, read-only (e.g. for tracker.Registrations).
func (r *Router) Routes() []Route {
	out := make([]Route, 0, len(r.routes))
	for _, typ := range r.Types() {
		out = append(out, Route{Type: typ, Topic: r.topic[typ]})
	}
	return out
}
