package tracker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// versionsTable names the table of the producers seen per (type, schema version).
func (t *Tracker) versionsTable() string { return t.table + "_versions" }

// VersionUsage is what the index observed of one event type at one payload schema
// version (ce_dataschemaversion).
type VersionUsage struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	// Producers are the sources seen publishing it, by source.
	Producers []ProducerUsage `json:"producers"`
	// DeadLetters counts its dead letters in the index (within the retention), which a
	// replay would hand to a consumer again.
	DeadLetters int `json:"dead_letters"`
}

// ProducerUsage is one source seen publishing a (type, version).
type ProducerUsage struct {
	Source    string    `json:"source"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Count is how many it published within the window Usage was asked for.
	Count int `json:"count"`
}

// queueVersions queues the upsert of the first and last time each producer was seen
// publishing each (type, version) of entries.
func (t *Tracker) queueVersions(b *pgx.Batch, entries []entry) {
	type key struct {
		typ, source string
		version     int
	}
	seen := map[key][2]time.Time{}
	for _, e := range entries {
		if e.dead || e.source == "" {
			continue
		}
		k := key{e.typ, e.source, e.version}
		r, ok := seen[k]
		if !ok {
			r = [2]time.Time{e.at, e.at}
		}
		if e.at.Before(r[0]) {
			r[0] = e.at
		}
		if e.at.After(r[1]) {
			r[1] = e.at
		}
		seen[k] = r
	}
	keys := slices.SortedFunc(maps.Keys(seen), func(a, b key) int { // a stable lock order across instances
		return strings.Compare(fmt.Sprint(a.typ, "\x00", a.version, "\x00", a.source), fmt.Sprint(b.typ, "\x00", b.version, "\x00", b.source))
	})
	for _, k := range keys {
		b.Queue(t.upsertVersion(), k.typ, k.version, k.source, seen[k][0], seen[k][1])
	}
}

// upsertVersion widens a (type, version, source) row to the times given.
func (t *Tracker) upsertVersion() string {
	return `INSERT INTO ` + t.versionsTable() + ` AS v (type, version, source, first_seen, last_seen)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (type, version, source) DO UPDATE SET first_seen = least(v.first_seen, excluded.first_seen),
			last_seen = greatest(v.last_seen, excluded.last_seen)`
}

// rebuildVersions records the producers of every (type, version) in the index (Rebuild).
func (t *Tracker) rebuildVersions(ctx context.Context) error {
	if _, err := t.db.Exec(ctx, `INSERT INTO `+t.versionsTable()+` AS v (type, version, source, first_seen, last_seen)
		SELECT type, schema_version, source, min(event_time), max(event_time) FROM `+t.table+`
		WHERE NOT dead_letter AND source <> '' GROUP BY type, schema_version, source ORDER BY 1, 2, 3
		ON CONFLICT (type, version, source) DO UPDATE SET first_seen = least(v.first_seen, excluded.first_seen),
			last_seen = greatest(v.last_seen, excluded.last_seen)`); err != nil {
		return fmt.Errorf("tracker: rebuild: versions: %w", err)
	}
	return nil
}

// Usage returns, per (event type, schema version) the index has seen, sorted: each
// producer with when it was first and last seen (kept past the retention of the events)
// and how many events it published within the last window (counted from the indexed
// events, so a window longer than the retention counts the retained ones), and the
// dead letters of it in the index.
func (t *Tracker) Usage(ctx context.Context, window time.Duration) ([]VersionUsage, error) {
	if window <= 0 {
		return nil, fmt.Errorf("%w: usage window must be positive, got %s", ErrInvalidConfig, window)
	}
	type key struct {
		typ     string
		version int
	}
	byKey := map[key]*VersionUsage{}
	get := func(typ string, version int) *VersionUsage {
		u := byKey[key{typ, version}]
		if u == nil {
			u = &VersionUsage{Type: typ, Version: version, Producers: []ProducerUsage{}}
			byKey[key{typ, version}] = u
		}
		return u
	}
	rows, err := t.db.Query(ctx, `SELECT v.type, v.version, v.source, v.first_seen, v.last_seen, coalesce(c.n, 0)
		FROM `+t.versionsTable()+` v LEFT JOIN (
			SELECT type, schema_version, source, count(*) AS n FROM `+t.table+`
			WHERE NOT dead_letter AND event_time >= $1 GROUP BY type, schema_version, source
		) c ON c.type = v.type AND c.schema_version = v.version AND c.source = v.source
		ORDER BY v.type, v.version, v.source`, t.now().Add(-window))
	if err != nil {
		return nil, fmt.Errorf("tracker: usage: %w", err)
	}
	var (
		typ     string
		version int
		p       ProducerUsage
	)
	if _, err := pgx.ForEachRow(rows, []any{&typ, &version, &p.Source, &p.FirstSeen, &p.LastSeen, &p.Count}, func() error {
		p.FirstSeen, p.LastSeen = p.FirstSeen.UTC(), p.LastSeen.UTC()
		u := get(typ, version)
		u.Producers = append(u.Producers, p)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("tracker: usage: %w", err)
	}
	rows, err = t.db.Query(ctx, `SELECT type, schema_version, count(*) FROM `+t.table+`
		WHERE dead_letter GROUP BY type, schema_version`)
	if err != nil {
		return nil, fmt.Errorf("tracker: usage: dead letters: %w", err)
	}
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&typ, &version, &n}, func() error {
		get(typ, version).DeadLetters = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("tracker: usage: dead letters: %w", err)
	}
	out := make([]VersionUsage, 0, len(byKey))
	for _, u := range byKey {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b VersionUsage) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	return out, nil
}

// Declared is what one service declares about one event type in its contracts: the
// schema versions it produces, those it handles, and those it accepts by upcasting them
// to one it handles (consumer.Standard's upcast step).
type Declared struct {
	Service  string `json:"service"`
	Type     string `json:"type"`
	Produces []int  `json:"produces,omitempty"`
	Handles  []int  `json:"handles,omitempty"`
	Accepts  []int  `json:"accepts,omitempty"`
}

// Retirement answers whether one version of an event type can be retired: its
// producers stopped, and its handlers and upcasters can be removed.
type Retirement struct {
	Type      string `json:"type"`
	Version   int    `json:"version"`
	Retirable bool   `json:"retirable"`
	// Reason says why, in one sentence: what still produces or needs the version, or
	// that nothing does.
	Reason string `json:"reason"`
	// Producers are the sources observed publishing it (see Usage).
	Producers []ProducerUsage `json:"producers"`
	// Consumers are the services that still handle or accept it, e.g. "inventory
	// (accepts, upcast)".
	Consumers []string `json:"consumers"`
}

// Retire answers whether version of typ can be retired, from what the index observed
// (usage, from Usage over window, as of now) and what the services declare. It cannot
// while a producer published it within the window, a service declares producing it, a
// dead letter of it could be replayed, or a service that handles or accepts it handles
// no later version of typ (retiring it would leave that service nothing it can handle).
// Otherwise it can: the services that still handle or accept it can drop that code.
func Retire(usage []VersionUsage, declared []Declared, typ string, version int, now time.Time, window time.Duration) Retirement {
	r := Retirement{Type: typ, Version: version, Producers: []ProducerUsage{}, Consumers: []string{}}
	var (
		blockers []string
		lastSeen time.Time
		deadN    int
	)
	if i := slices.IndexFunc(usage, func(u VersionUsage) bool { return u.Type == typ && u.Version == version }); i >= 0 {
		r.Producers, deadN = usage[i].Producers, usage[i].DeadLetters
	}
	since := now.Add(-window)
	for _, p := range r.Producers {
		if p.LastSeen.After(lastSeen) {
			lastSeen = p.LastSeen
		}
		if !p.LastSeen.Before(since) {
			blockers = append(blockers, fmt.Sprintf("%s published %d in the last %s (last at %s)",
				p.Source, p.Count, Window(window), p.LastSeen.Format(time.RFC3339)))
		}
	}
	for _, d := range declared {
		if d.Type != typ {
			continue
		}
		if slices.Contains(d.Produces, version) {
			blockers = append(blockers, d.Service+" still declares producing it")
		}
		handles, accepts := slices.Contains(d.Handles, version), slices.Contains(d.Accepts, version)
		if !handles && !accepts {
			continue
		}
		how := "handles"
		if !handles {
			how = "accepts, upcast"
		}
		r.Consumers = append(r.Consumers, fmt.Sprintf("%s (%s)", d.Service, how))
		if !slices.ContainsFunc(d.Handles, func(v int) bool { return v > version }) {
			blockers = append(blockers, fmt.Sprintf("%s handles no later version: upgrade it first", d.Service))
		}
	}
	if deadN > 0 {
		blockers = append(blockers, fmt.Sprintf("%d dead letter(s) of it could still be replayed", deadN))
	}
	name := fmt.Sprintf("v%d of %s", version, typ)
	switch {
	case len(blockers) > 0:
		r.Reason = "no: " + strings.Join(blockers, "; ")
		if !lastSeen.IsZero() && lastSeen.Before(since) {
			r.Reason += fmt.Sprintf("; none was published in the last %s (the last at %s)", Window(window), lastSeen.Format(time.RFC3339))
		}
		if len(r.Consumers) > 0 {
			r.Reason += "; still read by " + strings.Join(r.Consumers, ", ")
		}
	default:
		r.Retirable = true
		seen := "was never observed"
		if !lastSeen.IsZero() {
			seen = fmt.Sprintf("was last published at %s, before the %s window", lastSeen.Format(time.RFC3339), Window(window))
		}
		drop := "no service handles or accepts it"
		if len(r.Consumers) > 0 {
			drop = "drop it from " + strings.Join(r.Consumers, ", ")
		}
		r.Reason = fmt.Sprintf("yes: %s %s, no service declares producing it and no dead letter of it is left; %s", name, seen, drop)
	}
	return r
}

// Window formats a usage window without its zero units: 24h, 90m, 1h30m.
func Window(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
