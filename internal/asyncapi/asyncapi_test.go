package asyncapi

import "testing"

// The validator is a real one: documents that break the schema or point nowhere fail.
func TestValidate(t *testing.T) {
	const ok = `{"asyncapi": "3.0.0", "info": {"title": "t", "version": "1"},
		"channels": {"c": {"address": "c", "messages": {"m": {"$ref": "#/components/messages/m"}}}},
		"operations": {"o": {"action": "send", "channel": {"$ref": "#/channels/c"},
			"messages": [{"$ref": "#/channels/c/messages/m"}]}},
		"components": {"messages": {"m": {"name": "m"}}}}`
	if err := Validate([]byte(ok)); err != nil {
		t.Fatalf("a valid document: %v", err)
	}
	for name, doc := range map[string]string{
		"version 2": `{"asyncapi": "2.6.0", "info": {"title": "t", "version": "1"}}`,
		"operation without action": `{"asyncapi": "3.0.0", "info": {"title": "t", "version": "1"},
			"channels": {"c": {"address": "c"}}, "operations": {"o": {"channel": {"$ref": "#/channels/c"}}}}`,
		"unknown field":      `{"asyncapi": "3.0.0", "info": {"title": "t", "version": "1"}, "topics": {}}`,
		"dangling $ref":      `{"asyncapi": "3.0.0", "info": {"title": "t", "version": "1"}, "operations": {"o": {"action": "send", "channel": {"$ref": "#/channels/none"}}}}`,
		"not JSON":           `asyncapi: 3.0.0`,
		"info without title": `{"asyncapi": "3.0.0", "info": {"version": "1"}}`,
	} {
		if err := Validate([]byte(doc)); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}
