package contract

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Markdown returns c as a Markdown document titled title: per event (type, version), its
// topic, producers and consumers, the fields the producer writes (type, required,
// meaning from the schema's descriptions) and an example payload (from the schema's
// examples).
func (c Catalogue) Markdown(title, intro string) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n", title, intro)
	for _, k := range c.Keys() {
		ps, cs := c.Producers(k), c.Consumers(k)
		fmt.Fprintf(&b, "\n## %s v%d\n\n", k.Type, k.Version)
		var topics []string
		for _, d := range append(slices.Clone(ps), cs...) {
			if !slices.Contains(topics, d.Topic) {
				topics = append(topics, d.Topic)
			}
		}
		fmt.Fprintf(&b, "- Topic: %s\n- Producer: %s\n- Consumers: %s\n", codeList(topics), services(ps), services(cs))
		if len(ps) == 0 {
			continue
		}
		n, err := parseNode(ps[0].Schema)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", ps[0].Service, k, err)
		}
		fmt.Fprintf(&b, "\nFields (`%s`):\n\n| field | type | required | meaning |\n|---|---|---|---|\n", ps[0].Payload)
		fields(&b, "", n)
		ex, err := json.MarshalIndent(example(n), "", "  ")
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\nExample:\n\n```json\n%s\n```\n", ex)
	}
	return []byte(b.String()), nil
}

func codeList(ss []string) string {
	for i, s := range ss {
		ss[i] = "`" + s + "`"
	}
	return strings.Join(ss, ", ")
}

// services lists the declarations' services, each with its payload type.
func services(ds []Declaration) string {
	if len(ds) == 0 {
		return "none"
	}
	var out []string
	for _, d := range ds {
		if d.Role == Accepts {
			out = append(out, fmt.Sprintf("%s (`%s`, upcast to a later version)", d.Service, d.Payload))
			continue
		}
		out = append(out, fmt.Sprintf("%s (`%s`)", d.Service, d.Payload))
	}
	return strings.Join(out, ", ")
}

// fields writes a table row per property under n.
func fields(b *strings.Builder, path string, n *node) {
	n = n.flat()
	prefix := path
	if prefix != "" {
		prefix += "."
	}
	for _, name := range sortedKeys(n.Properties) {
		p := n.Properties[name].flat()
		req := "no"
		if n.required(name) {
			req = "yes"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", prefix+name, p.TypeString(), req, strings.ReplaceAll(p.Description, "|", `\|`))
		fields(b, prefix+name, p)
		if p.Items != nil {
			fields(b, prefix+name+"[]", p.Items)
		}
	}
}

// example returns a value valid under n: its first example, else one made of its parts.
func example(n *node) any {
	n = n.flat()
	if len(n.Examples) > 0 {
		return n.Examples[0]
	}
	if len(n.Enum) > 0 {
		return n.Enum[0]
	}
	switch t := n.types(); {
	case slices.Contains(t, "object"):
		m := map[string]any{}
		for name, p := range n.Properties {
			m[name] = example(p)
		}
		return m
	case slices.Contains(t, "array"):
		if n.Items == nil {
			return []any{}
		}
		return []any{example(n.Items)}
	case slices.Contains(t, "string"):
		return "string"
	case slices.Contains(t, "integer"), slices.Contains(t, "number"):
		if n.Minimum != nil {
			return *n.Minimum
		}
		return 1
	case slices.Contains(t, "boolean"):
		return true
	}
	return nil
}
