package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/choreo-saga/choreo/contract"
	reference "github.com/choreo-saga/choreo/services/saga"
	"github.com/choreo-saga/choreo/tracker"
)

// contractsReference is the -contracts value naming the reference saga's catalogue.
const contractsReference = "reference"

// withObservedContracts adds to opts the tracker's check of observed payloads against
// the catalogue named by spec: contractsReference (services/saga.Contracts), "off", or
// a catalogue file.
func withObservedContracts(opts []tracker.Option, spec string) ([]tracker.Option, error) {
	var (
		c   contract.Catalogue
		err error
	)
	switch spec {
	case "off":
		return opts, nil
	case contractsReference, "":
		c, err = reference.Contracts()
	default:
		var f *os.File
		if f, err = os.Open(spec); err == nil {
			c, err = contract.ReadCatalogue(f)
			_ = f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: -contracts %s: %w", errUsage, spec, err)
	}
	return append(opts, tracker.WithContracts(c)), nil
}

// printObserved prints the contract violations of observed payloads.
func printObserved(vs []tracker.ViolationCount, asJSON bool, std stdio) error {
	if asJSON {
		if vs == nil {
			vs = []tracker.ViolationCount{}
		}
		return printJSON(vs, std)
	}
	if len(vs) == 0 {
		_, err := fmt.Fprintln(std.out, "no observed payload breaks a declared schema (kept for the retention age)")
		return err
	}
	t := newTable("SOURCE", "TYPE", "VERSION", "CONSUMER", "ROLE", "COUNT", "LAST", "CORRELATION", "DETAIL").right(2, 5)
	for _, v := range vs {
		t.add(v.Source, v.Type, strconv.Itoa(v.Version), v.Service, string(v.Role), strconv.FormatInt(v.Count, 10),
			tsString(v.Latest.At), v.Latest.CorrelationID, v.Latest.Detail)
	}
	return t.render(std.out)
}
