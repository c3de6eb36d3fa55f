package tracker

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// Registration is a service's handler registration: Service receives events of Type from
// Topic. Registrations makes them from a consumer.Router.
type Registration struct {
	Service string
	Topic   string // "" when the handler takes the type from any topic
	Type    string
}

// Registrations returns the routes of a service's router as registrations, e.g. of an
// app.App: Registrations("shipping", svc.Router).
func Registrations(service string, r *consumer.Router) []Registration {
	routes := r.Routes()
	out := make([]Registration, len(routes))
	for i, rt := range routes {
		out[i] = Registration{Service: service, Topic: rt.Topic, Type: rt.Type}
	}
	return out
}

// AsyncAPIVersion is the version of the AsyncAPI specification AsyncAPI writes.
const AsyncAPIVersion = "3.0.0"

// unsafeKey matches what may not appear in a key of an AsyncAPI components map.
var unsafeKey = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func aaKey(parts ...string) string { return unsafeKey.ReplaceAllString(strings.Join(parts, "_"), "_") }

type (
	aaRef struct {
		Ref string `json:"$ref"`
	}
	aaTag struct {
		Name string `json:"name"`
	}
	aaSchema map[string]any

	aaChannel struct {
		Address  string           `json:"address"`
		Title    string           `json:"title,omitempty"`
		Messages map[string]aaRef `json:"messages"`
	}
	aaMessage struct {
		Name        string   `json:"name"`
		Title       string   `json:"title"`
		Summary     string   `json:"summary,omitempty"`
		ContentType string   `json:"contentType"`
		Headers     aaSchema `json:"headers"`
	}
	aaOperation struct {
		Action      string  `json:"action"`
		Channel     aaRef   `json:"channel"`
		Messages    []aaRef `json:"messages"`
		Summary     string  `json:"summary"`
		Description string  `json:"description,omitempty"`
		Tags        []aaTag `json:"tags"`
	}
	aaDoc struct {
		AsyncAPI string `json:"asyncapi"`
		Info     struct {
			Title       string `json:"title"`
			Version     string `json:"version"`
			Description string `json:"description"`
		} `json:"info"`
		DefaultContentType string                 `json:"defaultContentType"`
		Channels           map[string]aaChannel   `json:"channels"`
		Operations         map[string]aaOperation `json:"operations"`
		Components         struct {
			Messages map[string]aaMessage `json:"messages"`
		} `json:"components"`
	}
)

// headersSchema is the JSON Schema of the Kafka headers of an event of type typ: the
// CloudEvents binary-mode attributes choreo writes (event.ToRecord).
func headersSchema(typ string) aaSchema {
	str := func(desc string) aaSchema { return aaSchema{"type": "string", "description": desc} }
	return aaSchema{
		"type": "object",
		"required": []string{event.HeaderSpecVersion, event.HeaderID, event.HeaderSource, event.HeaderType,
			event.HeaderCorrelationID},
		"properties": map[string]any{
			event.HeaderSpecVersion:   aaSchema{"type": "string", "const": "1.0"},
			event.HeaderID:            str("event id, unique per event"),
			event.HeaderSource:        str("the producing service"),
			event.HeaderType:          aaSchema{"type": "string", "const": typ},
			event.HeaderSubject:       str("the entity; also the record key"),
			event.HeaderTime:          aaSchema{"type": "string", "format": "date-time"},
			event.HeaderCorrelationID: str("the saga's correlation id"),
			event.HeaderCausationID:   str("id of the event that caused this one"),
			event.HeaderContentType:   aaSchema{"type": "string", "const": event.ContentType},
			"traceparent":             str("W3C trace context"),
		},
	}
}

// AsyncAPI writes an AsyncAPI 3.0.0 document (JSON) of the flow and the given handler
// registrations: one channel per topic with the event types seen or handled on it, one
// message per event type with its CloudEvents headers, and per service a send operation
// for each type it was observed producing on a topic and a receive operation for each type
// it handles (a registration) or was observed answering (an event whose causation id names
// an event of that type). Payload schemas are not known to the index and are left out.
func (f Flow) AsyncAPI(title, version string, regs ...Registration) ([]byte, error) {
	var d aaDoc
	d.AsyncAPI = AsyncAPIVersion
	d.Info.Title, d.Info.Version = title, version
	d.Info.Description = "Event types, topics, producers and consumers as the choreo saga tracker observed " +
		"them in its index, plus the handler registrations it was given."
	d.DefaultContentType = event.ContentType
	d.Channels = map[string]aaChannel{}
	d.Operations = map[string]aaOperation{}
	d.Components.Messages = map[string]aaMessage{}

	// message adds typ on topic as a channel message and returns the operation's references.
	message := func(topic, typ string) (aaRef, aaRef) {
		mk, ck := aaKey(typ), aaKey(topic)
		if _, ok := d.Components.Messages[mk]; !ok {
			d.Components.Messages[mk] = aaMessage{Name: typ, Title: typ, ContentType: event.ContentType,
				Summary: "CloudEvents binary mode: the attributes are Kafka headers, the value is the data.",
				Headers: headersSchema(typ)}
		}
		ch, ok := d.Channels[ck]
		if !ok {
			ch = aaChannel{Address: topic, Title: topic, Messages: map[string]aaRef{}}
			d.Channels[ck] = ch
		}
		ch.Messages[mk] = aaRef{"#/components/messages/" + mk}
		return aaRef{"#/channels/" + ck}, aaRef{"#/channels/" + ck + "/messages/" + mk}
	}
	operation := func(service, action, topic, typ, desc string) {
		opKey := aaKey(service, action, typ, topic)
		if op, seen := d.Operations[opKey]; seen {
			if !strings.Contains(op.Description, desc) {
				op.Description += "; " + desc
				d.Operations[opKey] = op
			}
			return
		}
		chRef, msgRef := message(topic, typ)
		verb := map[string]string{"send": "sends", "receive": "receives"}[action]
		d.Operations[opKey] = aaOperation{Action: action, Channel: chRef, Messages: []aaRef{msgRef},
			Summary: fmt.Sprintf("%s %s %s on %s", service, verb, typ, topic), Description: desc,
			Tags: []aaTag{{Name: service}}}
	}

	for _, n := range f.Nodes {
		for _, p := range n.Producers {
			operation(p.Source, "send", p.Topic, n.Type, fmt.Sprintf("observed %d times", p.Count))
		}
	}
	for _, e := range f.Edges {
		if e.ByCausation == 0 {
			continue // a guess from time order does not say who consumed what
		}
		from, ok := f.Node(e.From)
		if !ok {
			continue
		}
		for _, topic := range from.Topics {
			operation(e.Source, "receive", topic, e.From,
				fmt.Sprintf("observed answering %s with %s %d times (by causation id)", e.From, e.To, e.ByCausation))
		}
	}
	for _, r := range regs {
		if r.Service == "" || r.Type == "" {
			return nil, fmt.Errorf("%w: registration %+v needs a service and a type", ErrInvalidConfig, r)
		}
		topics := []string{r.Topic}
		if r.Topic == "" { // any topic: those the type was observed on
			n, _ := f.Node(r.Type)
			topics = n.Topics
		}
		for _, topic := range topics {
			operation(r.Service, "receive", topic, r.Type, "registered handler")
		}
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("tracker: asyncapi: %w", err)
	}
	return append(b, '\n'), nil
}
