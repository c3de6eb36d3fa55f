package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/choreo-saga/choreo/contract"
	reference "github.com/choreo-saga/choreo/services/saga"
	"github.com/choreo-saga/choreo/tracker"
)

// usageFlags are the flags of `sagactl contracts usage` beyond the tracker's.
type usageFlags struct {
	window    time.Duration
	catalogue string // declarations file
	retire    string // "<type>@<version>": the question to answer
}

// readDeclared reads what the services declare, merged per (service, type): spec is
// contractsReference or empty (the reference saga's catalogue, from its code), "off"
// (nothing declared: the report shows only what the index observed), or a catalogue
// file in the JSON form `sagactl contracts -o` writes, of which each declaration's
// service, role, type and version are read.
func readDeclared(spec string) ([]tracker.Declared, error) {
	var c contract.Catalogue
	switch spec {
	case "off":
		return nil, nil
	case "", contractsReference:
		var err error
		if c, err = reference.Contracts(); err != nil {
			return nil, err
		}
	default:
		b, err := os.ReadFile(spec)
		if err != nil {
			return nil, fmt.Errorf("%w: -catalogue: %w", errUsage, err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("%w: -catalogue %s: %w", errUsage, spec, err)
		}
	}
	var out []tracker.Declared
	for _, d := range c.Declarations {
		i := slices.IndexFunc(out, func(o tracker.Declared) bool { return o.Service == d.Service && o.Type == d.Type })
		if i < 0 {
			out = append(out, tracker.Declared{Service: d.Service, Type: d.Type})
			i = len(out) - 1
		}
		switch d.Role {
		case contract.Produces:
			out[i].Produces = append(out[i].Produces, d.Version)
		case contract.Consumes:
			out[i].Handles = append(out[i].Handles, d.Version)
		case contract.Accepts:
			out[i].Accepts = append(out[i].Accepts, d.Version)
		default:
			return nil, fmt.Errorf("%w: -catalogue %s: %s of %s: role %q, want produces, consumes or accepts", errUsage, spec, d.Service, d.Type, d.Role)
		}
	}
	return out, nil
}

// parseRetire reads "<type>@<version>" (or "<type>@v<version>").
func parseRetire(s string) (string, int, error) {
	typ, v, ok := strings.Cut(s, "@")
	n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	if !ok || typ == "" || err != nil || n < 1 {
		return "", 0, fmt.Errorf("%w: -retire %q: want <type>@<version>, e.g. payment.authorized@1", errUsage, s)
	}
	return typ, n, nil
}

// usageReport is what `contracts usage` prints, and the console's contracts page shows.
type usageReport struct {
	Window   string                 `json:"window"`
	Versions []usageRow             `json:"versions"`
	Answer   *tracker.Retirement    `json:"answer,omitempty"`
	Declared []tracker.Declared     `json:"declared"`
	usage    []tracker.VersionUsage // as read
}

// usageRow is one (type, version): what was observed, who still reads it, and whether it
// can be retired.
type usageRow struct {
	tracker.VersionUsage
	Consumers []string           `json:"consumers"`
	Retire    tracker.Retirement `json:"retire"`
}

// buildUsage reads the usage over window and answers, for every (type, version)
// observed or declared, whether it can be retired.
func buildUsage(ctx context.Context, tr *tracker.Tracker, window time.Duration, declared []tracker.Declared, now time.Time) (usageReport, error) {
	usage, err := tr.Usage(ctx, window)
	if err != nil {
		return usageReport{}, err
	}
	rep := usageReport{Window: tracker.Window(window), Versions: []usageRow{}, Declared: declared, usage: usage}
	if rep.Declared == nil {
		rep.Declared = []tracker.Declared{}
	}
	rows := slices.Clone(usage)
	for _, d := range declared { // declared but never observed
		for _, v := range slices.Concat(d.Produces, d.Handles, d.Accepts) {
			if !slices.ContainsFunc(rows, func(u tracker.VersionUsage) bool { return u.Type == d.Type && u.Version == v }) {
				rows = append(rows, tracker.VersionUsage{Type: d.Type, Version: v, Producers: []tracker.ProducerUsage{}})
			}
		}
	}
	slices.SortFunc(rows, func(a, b tracker.VersionUsage) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	for _, u := range rows {
		r := tracker.Retire(usage, declared, u.Type, u.Version, now, window)
		rep.Versions = append(rep.Versions, usageRow{VersionUsage: u, Consumers: r.Consumers, Retire: r})
	}
	return rep, nil
}

// contractsUsage prints the usage report and, with -retire, the answer to the question.
func contractsUsage(ctx context.Context, tr *tracker.Tracker, f trackFlags, std stdio) error {
	declared, err := readDeclared(f.usage.catalogue)
	if err != nil {
		return err
	}
	rep, err := buildUsage(ctx, tr, f.usage.window, declared, time.Now())
	if err != nil {
		return err
	}
	if f.usage.retire != "" {
		typ, v, err := parseRetire(f.usage.retire)
		if err != nil {
			return err
		}
		r := tracker.Retire(rep.usage, declared, typ, v, time.Now(), f.usage.window)
		rep.Answer = &r
	}
	if f.c.json {
		return printJSON(rep, std)
	}
	t := newTable("TYPE", "VERSION", "PRODUCER", "FIRST SEEN", "LAST SEEN", "IN "+rep.Window, "DEAD", "CONSUMERS", "RETIRABLE").right(1, 5, 6)
	for _, row := range rep.Versions {
		consumers, retirable := orDash(strings.Join(row.Consumers, ", ")), "no"
		if row.Retire.Retirable {
			retirable = "yes"
		}
		dead := strconv.Itoa(row.DeadLetters)
		if len(row.Producers) == 0 {
			t.add(row.Type, strconv.Itoa(row.Version), "-", "-", "-", "0", dead, consumers, retirable)
		}
		for _, p := range row.Producers {
			t.add(row.Type, strconv.Itoa(row.Version), p.Source, p.FirstSeen.Format(time.RFC3339), p.LastSeen.Format(time.RFC3339),
				strconv.Itoa(p.Count), dead, consumers, retirable)
		}
	}
	if len(rep.Versions) == 0 {
		if _, err := fmt.Fprintln(std.out, "no events indexed and nothing declared"); err != nil {
			return err
		}
	} else if err := t.render(std.out); err != nil {
		return err
	}
	if rep.Answer != nil {
		_, err := fmt.Fprintf(std.out, "\ncan v%d of %s be retired? %s\n", rep.Answer.Version, rep.Answer.Type, rep.Answer.Reason)
		return err
	}
	return nil
}

// cmdContracts runs a contracts subcommand: usage and observed (the tracker's index, see
// contractsUsage and printObserved), check, or writes the catalogue.
func cmdContracts(ctx context.Context, args []string, std stdio) error {
	if len(args) > 0 {
		switch args[0] {
		case "usage", "observed":
			return cmdTrack(ctx, args, std)
		case "check":
			return contractsCheck(args[1:], std)
		}
	}
	return contractsWrite(args, std)
}
