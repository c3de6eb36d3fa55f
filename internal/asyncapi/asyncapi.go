// Package asyncapi checks documents against the official AsyncAPI 3.0.0 JSON Schema
// (3.0.0.json beside this file; see README.md for its source and licence) with
// github.com/santhosh-tekuri/jsonschema/v6, offline. Tests use it to validate the
// documents of tracker's Flow.AsyncAPI.
package asyncapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed 3.0.0.json
var schemaJSON []byte

// schemaID is the $id of the bundled schema's root.
const schemaID = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaID, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaID)
})

// Validate returns nil if doc (JSON) is a valid AsyncAPI 3.0.0 document whose local
// $refs ("#/…") all resolve, else an error saying what is wrong.
func Validate(doc []byte) error {
	s, err := compiled()
	if err != nil {
		return fmt.Errorf("asyncapi: compile the 3.0.0 schema: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("asyncapi: not JSON: %w", err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("asyncapi: not a valid 3.0.0 document: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		return fmt.Errorf("asyncapi: %w", err)
	}
	return refs(m, m)
}

// refs checks that every local $ref under v resolves in doc.
func refs(doc map[string]any, v any) error {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok && !resolves(doc, ref) {
			return fmt.Errorf("asyncapi: $ref %q does not resolve", ref)
		}
		for _, x := range v {
			if err := refs(doc, x); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := refs(doc, x); err != nil {
				return err
			}
		}
	}
	return nil
}

// resolves reports whether the local JSON pointer ref ("#/a/b") names a value in doc.
func resolves(doc map[string]any, ref string) bool {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = doc
	for _, part := range strings.Split(p, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}
