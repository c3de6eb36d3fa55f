package contract

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Rules of Check. A breaking rule fails the check; the others are reported for review.
const (
	// RuleFieldRemoved (breaking): a consumer requires a field the producer does not
	// declare at all (removed or renamed).
	RuleFieldRemoved = "field-removed"
	// RuleFieldOptional (breaking): a consumer requires a field the producer declares
	// but does not always write (not required in the producer's schema).
	RuleFieldOptional = "field-optional"
	// RuleFieldRetyped (breaking): a field a consumer reads has a type in the producer's
	// schema that the consumer's schema does not accept.
	RuleFieldRetyped = "field-retyped"
	// RuleEnumNarrowed (breaking): a consumer accepts fewer values of an enum than the
	// producer may write.
	RuleEnumNarrowed = "enum-narrowed"
	// RuleBoundNarrowed (breaking): a consumer's bound (maxLength, maxItems, maximum,
	// minLength, minItems, minimum) is tighter than the producer's.
	RuleBoundNarrowed = "bound-narrowed"
	// RuleClosedObject (breaking): a consumer refuses unknown fields
	// (additionalProperties false) and the producer writes a field it does not know.
	RuleClosedObject = "closed-object"
	// RuleEventDropped (breaking): a deployed consumer reads an event type and version
	// that no producer of the new tree declares any more, and no other version of the
	// type that one does.
	RuleEventDropped = "event-dropped"
	// RuleVersionUnread (breaking): a consumer of the new tree no longer reads (handles
	// or accepts) a version it read before, and a producer still writes it: the
	// consumer would dead-letter it as unsupported_version.
	RuleVersionUnread = "version-unread"
	// RuleVersionNew (not breaking): a producer of the new tree declares a version of a
	// type that deployed consumers of the type do not read yet. Switching the producer
	// to it must wait until they are upgraded (consumers first).
	RuleVersionNew = "version-new"
	// RuleFieldUnread (not breaking): a producer no longer writes a field, and no
	// consumer requires it.
	RuleFieldUnread = "field-dropped-unread"
	// RuleFieldAdded (not breaking): a producer writes a new field; readers ignore
	// unknown fields.
	RuleFieldAdded = "field-added"
)

// Sides of a comparison: the baseline is what is deployed, current what is about to be.
const (
	SideBaseline = "deployed"
	SideCurrent  = "new"
)

// Finding is one difference between the baseline and the current declarations.
type Finding struct {
	// Breaking is true when some deployment order makes a consumer refuse (dead-letter)
	// or misread events.
	Breaking bool `json:"breaking"`
	// Rule names the rule (RuleFieldRemoved, ...).
	Rule string `json:"rule"`
	// Type and Version name the event.
	Type    string `json:"type"`
	Version int    `json:"version"`
	// Producer and Consumer name the services, each with its side ("new payment",
	// "deployed order"); Consumer is empty for a producer-only change.
	Producer string `json:"producer"`
	Consumer string `json:"consumer,omitempty"`
	// Field is the path of the field in the payload ("amount", "items[].sku"); empty
	// for an event-level rule.
	Field string `json:"field,omitempty"`
	// Detail says what differs.
	Detail string `json:"detail"`
	// ConsumerService is the consumer's service name alone (for grouping).
	ConsumerService string `json:"consumer_service,omitempty"`
}

// Key returns the event f is about.
func (f Finding) Key() Key { return Key{f.Type, f.Version} }

// Report is the outcome of Check.
type Report struct {
	Findings []Finding `json:"findings"`
}

// Breaking reports whether any finding is breaking.
func (r Report) Breaking() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Breaking })
}

// BrokenConsumers returns the services a breaking finding names as consumer, sorted.
func (r Report) BrokenConsumers() []string {
	var out []string
	for _, f := range r.Findings {
		if f.Breaking && f.ConsumerService != "" && !slices.Contains(out, f.ConsumerService) {
			out = append(out, f.ConsumerService)
		}
	}
	slices.Sort(out)
	return out
}

// Check compares current declarations with a baseline (the deployed ones) and judges
// every change against what consumers declare they read. Services deploy one at a time,
// so each side of the current tree is judged against the other side of the baseline:
// every new producer's schema against every deployed consumer's, every new consumer's
// against every deployed producer's, and the new ones against each other. A rename in
// a Go type that producer and consumers share is thus breaking although the new tree
// agrees with itself. A producer change no consumer reads is reported, not breaking.
func Check(baseline, current Catalogue) (Report, error) {
	var r Report
	seen := map[string]bool{}
	add := func(f Finding) {
		k := strings.Join([]string{f.Rule, f.Type, fmt.Sprint(f.Version), f.Producer, f.ConsumerService, f.Field}, "\x00")
		if !seen[k] {
			seen[k] = true
			r.Findings = append(r.Findings, f)
		}
	}
	keys := append(baseline.Keys(), current.Keys()...)
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	keys = slices.Compact(keys)
	for _, k := range keys {
		pairs := []struct {
			ps, cs       []Declaration
			pSide, cSide string
		}{
			{current.Producers(k), baseline.Consumers(k), SideCurrent, SideBaseline},
			{baseline.Producers(k), current.Consumers(k), SideBaseline, SideCurrent},
			{current.Producers(k), current.Consumers(k), SideCurrent, SideCurrent},
		}
		for _, pr := range pairs {
			for _, p := range pr.ps {
				ps, err := parseNode(p.Schema)
				if err != nil {
					return Report{}, fmt.Errorf("%s %s: %w", p.Service, k, err)
				}
				for _, c := range pr.cs {
					cs, err := parseNode(c.Schema)
					if err != nil {
						return Report{}, fmt.Errorf("%s %s: %w", c.Service, k, err)
					}
					for _, v := range compat("", ps, cs) {
						add(Finding{Breaking: true, Rule: v.rule, Type: k.Type, Version: k.Version,
							Producer: pr.pSide + " " + p.Service, Consumer: pr.cSide + " " + c.Service,
							ConsumerService: c.Service, Field: v.field, Detail: v.detail})
					}
				}
			}
		}
		versionRules(k, baseline, current, add)
		broken := map[string]bool{}
		for _, f := range r.Findings {
			if f.Breaking && f.Key() == k {
				broken[f.Field] = true
			}
		}
		if err := producerChanges(k, baseline, current, broken, add); err != nil {
			return Report{}, err
		}
	}
	return r, nil
}

// versionRules judges the versions each side reads against the versions the other side
// writes: a deployed consumer left with nothing it reads (RuleEventDropped), a new
// consumer that stopped reading a version still written (RuleVersionUnread), and a new
// version deployed consumers do not read yet (RuleVersionNew).
func versionRules(k Key, baseline, current Catalogue, add func(Finding)) {
	if len(current.Producers(k)) == 0 && len(baseline.Producers(k)) > 0 {
		for _, c := range baseline.Consumers(k) {
			if !baseline.reads(c.Service, k.Type, k.Version, current) {
				add(Finding{Breaking: true, Rule: RuleEventDropped, Type: k.Type, Version: k.Version,
					Producer: SideBaseline + " " + baseline.Producers(k)[0].Service, Consumer: SideBaseline + " " + c.Service,
					ConsumerService: c.Service, Detail: "no producer of the new tree declares it, nor another version the consumer reads"})
			}
		}
	}
	for _, c := range baseline.Consumers(k) {
		if slices.ContainsFunc(current.Consumers(k), func(d Declaration) bool { return d.Service == c.Service }) {
			continue
		}
		for _, side := range []struct {
			name string
			cat  Catalogue
		}{{SideCurrent, current}, {SideBaseline, baseline}} {
			if ps := side.cat.Producers(k); len(ps) > 0 && slices.Contains(current.Services(), c.Service) {
				add(Finding{Breaking: true, Rule: RuleVersionUnread, Type: k.Type, Version: k.Version,
					Producer: side.name + " " + ps[0].Service, Consumer: SideCurrent + " " + c.Service, ConsumerService: c.Service,
					Detail: "the new consumer no longer reads this version, which is still written: it would dead-letter it (unsupported_version)"})
				break
			}
		}
	}
	if len(baseline.Producers(k)) > 0 {
		return
	}
	for _, p := range current.Producers(k) {
		var behind []string
		for _, d := range baseline.Declarations {
			if d.Type == k.Type && d.Role != Produces && !slices.Contains(behind, d.Service) &&
				!slices.ContainsFunc(baseline.Consumers(k), func(c Declaration) bool { return c.Service == d.Service }) {
				behind = append(behind, d.Service)
			}
		}
		if len(behind) > 0 {
			add(Finding{Rule: RuleVersionNew, Type: k.Type, Version: k.Version, Producer: SideCurrent + " " + p.Service,
				Detail: fmt.Sprintf("deployed %s do not read this version yet: switch the producer to it after they are upgraded", strings.Join(behind, ", "))})
		}
	}
}

// producerChanges reports the fields each producer added or dropped since the baseline
// that no rule above found breaking (broken holds the fields it did).
func producerChanges(k Key, baseline, current Catalogue, broken map[string]bool, add func(Finding)) error {
	for _, np := range current.Producers(k) {
		for _, op := range baseline.Producers(k) {
			if op.Service != np.Service {
				continue
			}
			o, err := parseNode(op.Schema)
			if err != nil {
				return err
			}
			n, err := parseNode(np.Schema)
			if err != nil {
				return err
			}
			for _, f := range fieldPaths("", o) {
				if !broken[f] && !slices.Contains(fieldPaths("", n), f) {
					add(Finding{Rule: RuleFieldUnread, Type: k.Type, Version: k.Version, Producer: SideCurrent + " " + np.Service,
						Field: f, Detail: "no longer written; no consumer requires it"})
				}
			}
			for _, f := range fieldPaths("", n) {
				if !broken[f] && !slices.Contains(fieldPaths("", o), f) {
					add(Finding{Rule: RuleFieldAdded, Type: k.Type, Version: k.Version, Producer: SideCurrent + " " + np.Service,
						Field: f, Detail: "new field; readers ignore unknown fields"})
				}
			}
		}
	}
	return nil
}

// node is the part of a JSON Schema the checker reads.
type node struct {
	Type                 any              `json:"type"`
	Properties           map[string]*node `json:"properties"`
	Required             []string         `json:"required"`
	Items                *node            `json:"items"`
	Enum                 []any            `json:"enum"`
	OneOf                []*node          `json:"oneOf"`
	AnyOf                []*node          `json:"anyOf"`
	AdditionalProperties json.RawMessage  `json:"additionalProperties"`
	MaxLength            *float64         `json:"maxLength"`
	MinLength            *float64         `json:"minLength"`
	MaxItems             *float64         `json:"maxItems"`
	MinItems             *float64         `json:"minItems"`
	Maximum              *float64         `json:"maximum"`
	Minimum              *float64         `json:"minimum"`
	Description          string           `json:"description"`
	Examples             []any            `json:"examples"`
	Format               string           `json:"format"`
}

func parseNode(doc []byte) (*node, error) {
	var n node
	if err := json.Unmarshal(doc, &n); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return n.flat(), nil
}

// flat folds a oneOf/anyOf of alternatives (a nullable field: X or null) into one node
// whose types are the union of theirs.
func (n *node) flat() *node {
	alts := append(slices.Clone(n.OneOf), n.AnyOf...)
	if len(alts) == 0 {
		return n
	}
	out := *n
	var types []string
	for _, a := range alts {
		a = a.flat()
		types = append(types, a.types()...)
		if !slices.Equal(a.types(), []string{"null"}) {
			t := out.Type
			out = *a
			out.Type = t
		}
	}
	out.Type, out.OneOf, out.AnyOf = toAny(types), nil, nil
	return &out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// types returns n's types ([] means any).
func (n *node) types() []string {
	switch t := n.Type.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// TypeString renders n's type for a reader: "string", "array of object", "integer or null".
func (n *node) TypeString() string {
	ts := n.types()
	if len(ts) == 0 {
		return "any"
	}
	var parts []string
	for _, t := range ts {
		if t == "array" && n.Items != nil {
			t = "array of " + n.Items.flat().TypeString()
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, " or ")
}

func (n *node) required(name string) bool { return slices.Contains(n.Required, name) }

func (n *node) closed() bool { return strings.TrimSpace(string(n.AdditionalProperties)) == "false" }

// accepts reports whether a value of JSON type t is accepted by types (none: any).
func accepts(types []string, t string) bool {
	return len(types) == 0 || slices.Contains(types, t) || t == "integer" && slices.Contains(types, "number")
}

type violationOf struct{ rule, field, detail string }

// compat lists what makes payloads valid under producer p invalid under consumer c.
func compat(path string, p, c *node) []violationOf {
	p, c = p.flat(), c.flat()
	var out []violationOf
	at := path
	if at == "" {
		at = "(payload)"
	}
	pt, ct := p.types(), c.types()
	if len(pt) == 0 && len(ct) > 0 {
		out = append(out, violationOf{RuleFieldRetyped, at, fmt.Sprintf("producer writes any type, consumer accepts %s", c.TypeString())})
	}
	for _, t := range pt {
		if !accepts(ct, t) {
			out = append(out, violationOf{RuleFieldRetyped, at, fmt.Sprintf("producer writes %s, consumer accepts %s", p.TypeString(), c.TypeString())})
			return out
		}
	}
	if len(c.Enum) > 0 {
		if len(p.Enum) == 0 {
			out = append(out, violationOf{RuleEnumNarrowed, at, fmt.Sprintf("consumer accepts only %v, producer any value", c.Enum)})
		}
		for _, v := range p.Enum {
			if !slices.ContainsFunc(c.Enum, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
				out = append(out, violationOf{RuleEnumNarrowed, at, fmt.Sprintf("producer may write %v, consumer accepts only %v", v, c.Enum)})
			}
		}
	}
	for _, b := range []struct {
		name   string
		pv, cv *float64
		upper  bool
	}{
		{"maxLength", p.MaxLength, c.MaxLength, true}, {"maxItems", p.MaxItems, c.MaxItems, true}, {"maximum", p.Maximum, c.Maximum, true},
		{"minLength", p.MinLength, c.MinLength, false}, {"minItems", p.MinItems, c.MinItems, false}, {"minimum", p.Minimum, c.Minimum, false},
	} {
		switch {
		case b.cv == nil:
		case b.pv == nil:
			out = append(out, violationOf{RuleBoundNarrowed, at, fmt.Sprintf("consumer %s %v, producer unbounded", b.name, *b.cv)})
		case b.upper && *b.pv > *b.cv, !b.upper && *b.pv < *b.cv:
			out = append(out, violationOf{RuleBoundNarrowed, at, fmt.Sprintf("consumer %s %v, producer %v", b.name, *b.cv, *b.pv)})
		}
	}
	prefix := path
	if prefix != "" {
		prefix += "."
	}
	for _, name := range sortedKeys(c.Properties) {
		cp := c.Properties[name]
		pp, ok := p.Properties[name]
		switch {
		case !ok && c.required(name):
			out = append(out, violationOf{RuleFieldRemoved, prefix + name, "consumer requires it; producer does not write it"})
		case !ok:
		case c.required(name) && !p.required(name):
			out = append(out, violationOf{RuleFieldOptional, prefix + name, "consumer requires it; producer does not always write it"})
			out = append(out, compat(prefix+name, pp, cp)...)
		default:
			out = append(out, compat(prefix+name, pp, cp)...)
		}
	}
	if c.closed() {
		for _, name := range sortedKeys(p.Properties) {
			if _, ok := c.Properties[name]; !ok {
				out = append(out, violationOf{RuleClosedObject, prefix + name, "producer writes it; consumer refuses unknown fields"})
			}
		}
	}
	if p.Items != nil && c.Items != nil {
		out = append(out, compat(path+"[]", p.Items, c.Items)...)
	}
	return out
}

// fieldPaths lists the paths of every property under n.
func fieldPaths(path string, n *node) []string {
	n = n.flat()
	prefix := path
	if prefix != "" {
		prefix += "."
	}
	var out []string
	for _, name := range sortedKeys(n.Properties) {
		out = append(out, prefix+name)
		out = append(out, fieldPaths(prefix+name, n.Properties[name])...)
	}
	if n.Items != nil {
		out = append(out, fieldPaths(path+"[]", n.Items)...)
	}
	return out
}

func sortedKeys(m map[string]*node) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
