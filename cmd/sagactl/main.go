package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Defaults of the connection flags.
const (
	defaultOrderURL = "http://127.0.0.1:8080"
	defaultBrokers  = "127.0.0.1:9092"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], stdio{
		out:      os.Stdout,
		err:      os.Stderr,
		getenv:   withDemoEnv(os.Getenv, demoEnvFile),
		terminal: isTerminal(os.Stderr),
		self:     selfName(os.Args[0]),
	})
	stop()
	os.Exit(code)
}

// stdio is the process environment a command runs in; tests substitute buffers.
type stdio struct {
	out, err io.Writer
	getenv   func(string) string
	// terminal is true when err is a terminal: load then draws a progress bar.
	terminal bool
	// self is how to run this sagactl again, for the commands it prints (see selfName);
	// empty means "sagactl".
	self string
}

// name is the command that runs this sagactl, as the commands it prints start.
func (s stdio) name() string {
	if s.self == "" {
		return "sagactl"
	}
	return s.self
}

// selfName is how to run this binary again given os.Args[0]: "sagactl" when the shell
// found it on PATH, "go run ./cmd/sagactl" for a go run build, and otherwise the path as
// typed (bin/sagactl), so that a printed command works as printed.
func selfName(arg0 string) string {
	switch {
	case arg0 == "" || !strings.ContainsRune(arg0, filepath.Separator):
		return "sagactl"
	case strings.Contains(arg0, string(filepath.Separator)+"go-build"):
		return "go run ./cmd/sagactl"
	}
	return arg0
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const usage = `sagactl: operate choreo's demo saga.

Usage:
  sagactl order <id>                       an order's state, transitions, trace id and Jaeger link
  sagactl order retry-compensation <id>    re-send the cancellation of a CANCELLING or COMPENSATION_FAILED order
  sagactl stuck [-older-than 5m]           stuck orders, oldest first
  sagactl dlq list [topic]                 dead-letter topics, or the dead letters of one with reasons
  sagactl dlq show <topic> <partition:offset>
  sagactl dlq replay <topic> <partition:offset>... | -all [-reason R] [-group G] [-source] [-dry-run]
  sagactl load [-n 200] [-rate 50] [-mix ` + defaultMix + `]
  sagactl migrate [-database-url URL]      apply the library's table migrations, print the versions
  sagactl console [-addr 127.0.0.1:8090]   the operations console in the browser (overview, orders, dead letters)
  sagactl track -db URL -config sagas.json index any saga's events (own group); track stuck|list|saga <id> query it
  sagactl flow [-last D] [-svg F] [-asyncapi F] the tracker's observed flow of event types; as SVG, as AsyncAPI 3.0
  sagactl contracts [-o F] [-asyncapi F] [-markdown F] the declared contracts: catalogue JSON, AsyncAPI 3.0, docs/events.md
  sagactl contracts check -baseline F [-format table|json|github] exit 1 when a change breaks a consumer of the baseline
  sagactl contracts usage [-retire type@version] per event type and version: producers, last seen, consumers; can it be retired?
  sagactl contracts observed               observed payloads that break a declared schema, per source, type, version and consumer (tracker index)

Connection flags (every command; before or after its name): -order-url (env ORDER_URL, default ` + defaultOrderURL + `),
-brokers (env KAFKA_BROKERS, default ` + defaultBrokers + `), -timeout, -json, and Kafka security:
-kafka-sasl-mechanism, -kafka-sasl-username, -kafka-sasl-password, -kafka-tls, -kafka-tls-ca-file,
-kafka-tls-cert-file, -kafka-tls-key-file, -kafka-tls-server-name (env KAFKA_SASL_*, KAFKA_TLS*, as the services).
In a clone where "DEMO_KEEP=1 make demo" runs, sagactl takes the addresses it is not given
(ORDER_URL, KAFKA_BROKERS, CONSOLE_*, TRACKER_*) from the demo's .demo/env.
Run "sagactl <command> -h" for a command's flags.

Exit codes: 0 ok, 1 failure, 2 usage error, 3 service, broker or database unreachable.
`

func run(ctx context.Context, args []string, std stdio) int {
	std.out, std.err = safeWriter{w: std.out}, safeWriter{w: std.err, keepCR: true} // safeout.go
	args, err := hoistGlobalFlags(args, std)
	if err != nil {
		fmt.Fprintf(std.err, "sagactl: %s\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return exitUsage
	}
	if len(args) == 0 {
		fmt.Fprint(std.err, usage)
		return exitUsage
	}
	switch args[0] {
	case "order":
		err = cmdOrder(ctx, args[1:], std)
	case "stuck":
		err = cmdStuck(ctx, args[1:], std)
	case "dlq":
		err = cmdDLQ(ctx, args[1:], std)
	case "load":
		err = cmdLoad(ctx, args[1:], std)
	case "migrate":
		err = cmdMigrate(ctx, args[1:], std)
	case "console":
		err = cmdConsole(ctx, args[1:], std)
	case "track":
		err = cmdTrack(ctx, args[1:], std)
	case "flow":
		err = cmdTrack(ctx, append([]string{"flow"}, args[1:]...), std)
	case "contracts":
		err = cmdContracts(ctx, args[1:], std)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(std.out, usage)
		return exitOK
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		msg = strings.TrimPrefix(msg, "sagactl: ")
		printf(std.err, "sagactl: %s\n", msg)
		if errors.Is(err, errUsage) {
			fmt.Fprintln(std.err, `run "sagactl help" for usage`)
		}
	}
	return exitCode(err)
}

// hoistGlobalFlags lets the connection flags come before the command too
// ("sagactl -order-url URL load -n 5"): it moves them after the command's name, where
// the command's own flag set parses them.
func hoistGlobalFlags(args []string, std stdio) ([]string, error) {
	if len(args) == 0 || !strings.HasPrefix(args[0], "-") || isHelp(args[0]) {
		return args, nil
	}
	var c conn
	fs := newFlagSet("", std, &c)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	rest := fs.Args()
	leading := args[:len(args)-len(rest)]
	if len(leading) > 0 && leading[len(leading)-1] == "--" {
		leading = leading[:len(leading)-1]
	}
	if len(rest) == 0 {
		return nil, nil
	}
	return append(append([]string{rest[0]}, leading...), rest[1:]...), nil
}

func isHelp(a string) bool {
	switch a {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// conn holds the flags every command accepts.
type conn struct {
	orderURL string
	brokers  string
	timeout  time.Duration
	json     bool
	kafkaSec kafkaSecFlags
	// orderToken is the order API's bearer token (-order-token, env ORDER_API_TOKEN).
	orderToken string
}

func newFlagSet(name string, std stdio, c *conn) *flag.FlagSet {
	fs := flag.NewFlagSet("sagactl "+name, flag.ContinueOnError)
	fs.SetOutput(std.err)
	orderURL, brokers := std.getenv("ORDER_URL"), std.getenv("KAFKA_BROKERS")
	if orderURL == "" {
		orderURL = defaultOrderURL
	}
	if brokers == "" {
		brokers = defaultBrokers
	}
	fs.StringVar(&c.orderURL, "order-url", orderURL, "order service base `URL` (env ORDER_URL)")
	fs.StringVar(&c.brokers, "brokers", brokers, "comma-separated Kafka seed `brokers` (env KAFKA_BROKERS)")
	durationVar(fs, &c.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of tables")
	c.kafkaSec = addKafkaSecFlags(fs, std.getenv)
	fs.StringVar(&c.orderToken, "order-token", std.getenv("ORDER_API_TOKEN"),
		"bearer `token` of the order API (env ORDER_API_TOKEN; prefer the environment: flags show in ps)")
	return fs
}

// parse parses flags and positional arguments in any order ("order <id> -json" and
// "order -json <id>" both work) and returns the positional ones. Everything after "--"
// is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first positional argument or after "--".
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("sagactl: write json: %w", err)
	}
	return nil
}
