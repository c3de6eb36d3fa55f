package contract

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// unsafeKey matches what may not appear in a key of an AsyncAPI components map.
var unsafeKey = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func aaKey(parts ...string) string { return unsafeKey.ReplaceAllString(strings.Join(parts, "_"), "_") }

type aaRef struct {
	Ref string `json:"$ref"`
}

// AsyncAPI returns c as an AsyncAPI 3.0.0 document (JSON): a channel per topic, and per
// declaration a message carrying the declaring service's payload schema (what its
// producer writes or its consumer accepts) and a send (produces) or receive (consumes,
// accepts) operation tagged with the service.
func (c Catalogue) AsyncAPI(title, version string) ([]byte, error) {
	channels := map[string]map[string]any{}
	operations := map[string]any{}
	messages := map[string]any{}
	for _, d := range c.Declarations {
		var schema map[string]any
		if err := json.Unmarshal(d.Schema, &schema); err != nil {
			return nil, fmt.Errorf("%w: %s %s %s: %w", ErrInvalidSchema, d.Service, d.Role, d.Key(), err)
		}
		delete(schema, "$schema") // the payload is an AsyncAPI schema, a superset of the keywords used
		v := strconv.Itoa(d.Version)
		mk, ck := aaKey(d.Type, "v"+v, d.Service, string(d.Role)), aaKey(d.Topic)
		messages[mk] = map[string]any{
			"name": d.Type, "title": fmt.Sprintf("%s v%d (%s %s)", d.Type, d.Version, d.Service, d.Role),
			"summary":     fmt.Sprintf("%s %s it as %s.", d.Service, d.Role, d.Payload),
			"contentType": "application/json",
			"headers": map[string]any{"type": "object", "required": []string{"ce_type"}, "properties": map[string]any{
				"ce_type":              map[string]any{"type": "string", "const": d.Type},
				"ce_dataschemaversion": map[string]any{"type": "string", "const": v, "description": "payload schema version; absent means 1"},
			}},
			"payload": schema,
		}
		ch, ok := channels[ck]
		if !ok {
			ch = map[string]any{"address": d.Topic, "title": d.Topic, "messages": map[string]aaRef{}}
			channels[ck] = ch
		}
		ch["messages"].(map[string]aaRef)[mk] = aaRef{"#/components/messages/" + mk}
		action, verb := "send", "sends"
		if d.Role != Produces {
			action, verb = "receive", "receives"
		}
		operations[aaKey(d.Service, action, d.Type, "v"+v)] = map[string]any{
			"action": action, "channel": aaRef{"#/channels/" + ck},
			"messages": []aaRef{{"#/channels/" + ck + "/messages/" + mk}},
			"summary":  fmt.Sprintf("%s %s %s v%d on %s", d.Service, verb, d.Type, d.Version, d.Topic),
			"tags":     []map[string]string{{"name": d.Service}},
		}
	}
	doc := map[string]any{
		"asyncapi": "3.0.0",
		"info": map[string]any{"title": title, "version": version,
			"description": "The declared contracts: per service, the events it produces and consumes with their payload schemas."},
		"defaultContentType": "application/json",
		"channels":           channels,
		"operations":         operations,
		"components":         map[string]any{"messages": messages},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("contract: asyncapi: %w", err)
	}
	return append(b, '\n'), nil
}
