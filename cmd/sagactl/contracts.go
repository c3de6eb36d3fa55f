package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/choreo-saga/choreo/contract"
	reference "github.com/choreo-saga/choreo/services/saga"
)

// errBreaking is returned by contracts check when a change breaks a consumer (exit 1).
var errBreaking = errors.New("sagactl: breaking contract change")

// currentCatalogue returns the catalogue in file, or the reference saga's declarations
// when file is empty.
func currentCatalogue(file string) (contract.Catalogue, error) {
	if file == "" {
		return reference.Contracts()
	}
	return readCatalogueFile("-catalogue", file)
}

func readCatalogueFile(flagName, file string) (contract.Catalogue, error) {
	f, err := os.Open(file)
	if err != nil {
		return contract.Catalogue{}, fmt.Errorf("%w: %s: %w", errUsage, flagName, err)
	}
	defer f.Close()
	c, err := contract.ReadCatalogue(f)
	if err != nil {
		return contract.Catalogue{}, fmt.Errorf("%s %s: %w", flagName, file, err)
	}
	return c, nil
}

// contractsCheck runs `sagactl contracts check`.
func contractsCheck(args []string, std stdio) error {
	var c conn
	fs := newFlagSet("contracts check", std, &c)
	baseline := fs.String("baseline", "", "the deployed declarations: a catalogue `file` (as sagactl contracts -o writes it); required")
	catalogue := fs.String("catalogue", "", "the new declarations: a catalogue `file` (default: the reference saga's, from its code)")
	format := fs.String("format", "table", "output `format`: table, json (as -json) or github (workflow annotations)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl contracts check -baseline FILE [-catalogue FILE] [-format table|json|github]\n\n"+
			"Compares the new declarations with the deployed baseline, each side of the new tree against\n"+
			"the other side of the baseline, and exits 1 when a change breaks a consumer (docs/contracts.md).\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: contracts check takes no arguments, got %q", errUsage, pos)
	}
	if c.json {
		*format = "json"
	}
	if *baseline == "" {
		return fmt.Errorf("%w: contracts check needs -baseline FILE", errUsage)
	}
	if *format != "table" && *format != "json" && *format != "github" {
		return fmt.Errorf("%w: -format %q: want table, json or github", errUsage, *format)
	}
	base, err := readCatalogueFile("-baseline", *baseline)
	if err != nil {
		return err
	}
	cur, err := currentCatalogue(*catalogue)
	if err != nil {
		return err
	}
	r, err := contract.Check(base, cur)
	if err != nil {
		return err
	}
	switch *format {
	case "json":
		err = writeJSON(std.out, checkJSON{Breaking: r.Breaking(), BrokenConsumers: nonNil(r.BrokenConsumers()), Findings: nonNil(r.Findings)})
	case "github":
		err = writeGitHub(std.out, *baseline, r)
	default:
		err = writeCheckTable(std.out, r)
	}
	if err != nil {
		return err
	}
	if r.Breaking() {
		return fmt.Errorf("%w: consumers broken: %s", errBreaking, strings.Join(r.BrokenConsumers(), ", "))
	}
	return nil
}

// checkJSON is the -json form of a check.
type checkJSON struct {
	Breaking        bool               `json:"breaking"`
	BrokenConsumers []string           `json:"broken_consumers"`
	Findings        []contract.Finding `json:"findings"`
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func writeCheckTable(w io.Writer, r contract.Report) error {
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintln(w, "no change to the contracts")
		return err
	}
	t := newTable("", "RULE", "EVENT", "FIELD", "PRODUCER", "CONSUMER", "DETAIL")
	for _, f := range r.Findings {
		mark := "ok"
		if f.Breaking {
			mark = "BREAKING"
		}
		t.add(mark, f.Rule, fmt.Sprintf("%s v%d", f.Type, f.Version), f.Field, f.Producer, f.Consumer, f.Detail)
	}
	if err := t.render(w); err != nil {
		return err
	}
	if r.Breaking() {
		_, err := printf(w, "\nbreaking: consumers broken: %s\n", strings.Join(r.BrokenConsumers(), ", "))
		return err
	}
	_, err := fmt.Fprintln(w, "\nnot breaking: no consumer reads what changed")
	return err
}

// writeGitHub writes each finding as a GitHub Actions workflow command (an error
// annotation when breaking, a notice otherwise) on the baseline file.
func writeGitHub(w io.Writer, baseline string, r contract.Report) error {
	for _, f := range r.Findings {
		level := "notice"
		if f.Breaking {
			level = "error"
		}
		at := fmt.Sprintf("%s v%d", f.Type, f.Version)
		if f.Field != "" {
			at += " " + f.Field
		}
		msg := fmt.Sprintf("%s: %s", at, f.Detail)
		if f.Consumer != "" {
			msg = fmt.Sprintf("%s: %s → %s: %s", at, f.Producer, f.Consumer, f.Detail)
		} else if f.Producer != "" {
			msg = fmt.Sprintf("%s: %s: %s", at, f.Producer, f.Detail)
		}
		if _, err := fmt.Fprintf(w, "::%s file=%s,title=%s::%s\n", level, ghProperty(baseline), ghProperty("contract "+f.Rule), ghData(msg)); err != nil {
			return err
		}
	}
	return nil
}

// ghData escapes a workflow command's message; ghProperty a property's value.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// contractsWrite runs `sagactl contracts`: it writes the catalogue.
func contractsWrite(args []string, std stdio) error {
	var c conn
	fs := newFlagSet("contracts", std, &c)
	catalogue := fs.String("catalogue", "", "the declarations: a catalogue `file` (default: the reference saga's, from its code)")
	out := fs.String("o", "", "write the catalogue (JSON, the form of a baseline) to this `file` instead of stdout")
	asyncapi := fs.String("asyncapi", "", "also write the AsyncAPI 3.0.0 document (JSON) to this `file`")
	markdown := fs.String("markdown", "", "also write the events' Markdown reference (as docs/events.md) to this `file`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: sagactl contracts [-catalogue FILE] [-o FILE] [-asyncapi FILE] [-markdown FILE]\n\nWrites the declarations of every service (docs/contracts.md).\n\nFlags:")
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: unknown contracts subcommand %q: want usage, check, or flags", errUsage, pos[0])
	}
	cat, err := currentCatalogue(*catalogue)
	if err != nil {
		return err
	}
	if *asyncapi != "" {
		doc, err := cat.AsyncAPI("choreo reference saga: declared contracts", "1")
		if err == nil {
			err = os.WriteFile(*asyncapi, doc, 0o644)
		}
		if err != nil {
			return err
		}
	}
	if *markdown != "" {
		doc, err := cat.Markdown("Events of the reference saga", eventsIntro)
		if err == nil {
			err = os.WriteFile(*markdown, doc, 0o644)
		}
		if err != nil {
			return err
		}
	}
	if *out == "" {
		if *asyncapi != "" || *markdown != "" {
			return nil
		}
		return cat.WriteJSON(std.out)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := cat.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// eventsIntro opens docs/events.md.
const eventsIntro = "Generated by `go run ./cmd/sagactl contracts -asyncapi docs/events.asyncapi.json -markdown docs/events.md`\n" +
	"from the declarations of the order, payment and inventory services (package services/saga); do not edit.\n" +
	"Each event's fields are those its producer writes; a consumer may read fewer (its payload type is named).\n" +
	"How contracts are declared and checked: [contracts.md](contracts.md)."
