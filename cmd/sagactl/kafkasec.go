package main

import (
	"flag"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
)

// kafkaSecFlags are the -kafka-sasl-*, -kafka-tls* and -kafka-compression flags. Each
// defaults to the environment variable the services read (app.LoadKafkaSecurity,
// "KAFKA_COMPRESSION"), so sagactl and the services share one configuration.
type kafkaSecFlags map[string]*string

// kafkaSecFlagNames maps each flag to its environment variable.
var kafkaSecFlagNames = []struct{ flag, env, usage string }{
	{"kafka-sasl-mechanism", "KAFKA_SASL_MECHANISM", "Kafka SASL `mechanism`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
	{"kafka-sasl-username", "KAFKA_SASL_USERNAME", "Kafka SASL `user`"},
	{"kafka-sasl-password", "KAFKA_SASL_PASSWORD", "Kafka SASL `password` (prefer the environment: flags show in ps)"},
	{"kafka-tls", "KAFKA_TLS", "dial Kafka with TLS: `on` or off"},
	{"kafka-tls-ca-file", "KAFKA_TLS_CA_FILE", "PEM `file` of the CAs of the brokers' certificates"},
	{"kafka-tls-cert-file", "KAFKA_TLS_CERT_FILE", "PEM client certificate `file` (mutual TLS)"},
	{"kafka-tls-key-file", "KAFKA_TLS_KEY_FILE", "PEM client key `file` (mutual TLS)"},
	{"kafka-tls-server-name", "KAFKA_TLS_SERVER_NAME", "`name` expected in the brokers' certificates"},
	{"kafka-compression", "KAFKA_COMPRESSION", "batch `codec` of the records sagactl produces (dlq replay): none, gzip, snappy, lz4 or zstd; empty: " + app.DefaultKafkaCompression},
}

func addKafkaSecFlags(fs *flag.FlagSet, getenv func(string) string) kafkaSecFlags {
	f := make(kafkaSecFlags)
	for _, n := range kafkaSecFlagNames {
		f[n.env] = fs.String(n.flag, getenv(n.env), n.usage+" (env "+n.env+")")
	}
	return f
}

// security validates the flags as app.LoadKafkaSecurity does the variables.
func (f kafkaSecFlags) security() (app.KafkaSecurity, error) {
	vals := make(map[string]string, len(f))
	for k, v := range f {
		vals[k] = *v
	}
	env := app.MapEnv(vals)
	s := app.LoadKafkaSecurity(env)
	if err := env.Err(); err != nil {
		return s, fmt.Errorf("%w: %w", errUsage, err)
	}
	return s, nil
}

// clientOptions returns the options every Kafka client of sagactl starts from.
func (c conn) clientOptions(brokers []string) ([]kgo.Opt, app.KafkaSecurity, error) {
	s, err := c.kafkaSec.security()
	if err != nil {
		return nil, s, err
	}
	opts, err := s.Options()
	if err != nil {
		return nil, s, fmt.Errorf("%w: %w", errUsage, err)
	}
	var codec string // the default when the command has no -kafka-compression flag
	if f := c.kafkaSec["KAFKA_COMPRESSION"]; f != nil {
		codec = *f
	}
	compression, err := app.KafkaCompressionOption(codec)
	if err != nil {
		return nil, s, fmt.Errorf("%w: -kafka-compression: %w", errUsage, err)
	}
	return append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTimeout(c.timeout), compression}, opts...), s, nil
}
