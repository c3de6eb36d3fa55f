package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Names of the environment variables of [LoadKafkaSecurity]: one set for every Kafka
// client of a service (consumers, relay, dead-lettering) and for sagactl.
const (
	envKafkaSASLMechanism = "KAFKA_SASL_MECHANISM"
	envKafkaSASLUsername  = "KAFKA_SASL_USERNAME"
	envKafkaSASLPassword  = "KAFKA_SASL_PASSWORD"
	envKafkaTLS           = "KAFKA_TLS"
	envKafkaTLSCAFile     = "KAFKA_TLS_CA_FILE"
	envKafkaTLSCertFile   = "KAFKA_TLS_CERT_FILE"
	envKafkaTLSKeyFile    = "KAFKA_TLS_KEY_FILE"
	envKafkaTLSServerName = "KAFKA_TLS_SERVER_NAME"
)

// SASL mechanisms of [KafkaSecurity].
const (
	saslPlain       = "PLAIN"
	saslScramSHA256 = "SCRAM-SHA-256"
	saslScramSHA512 = "SCRAM-SHA-512"
)

// KafkaSecurity is how a Kafka client authenticates and encrypts its connections. The
// zero value is a plaintext, unauthenticated client (a local broker).
type KafkaSecurity struct {
	// SASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (KAFKA_SASL_MECHANISM,
	// case-insensitive), or empty for no SASL. PLAIN sends the password as it is: use it
	// only with TLS.
	SASLMechanism string
	// SASLUsername and SASLPassword are the SASL credentials (KAFKA_SASL_USERNAME,
	// KAFKA_SASL_PASSWORD); both are required with a mechanism.
	SASLUsername, SASLPassword string
	// TLS dials the brokers with TLS (KAFKA_TLS, on/off; default off).
	TLS bool
	// TLSCAFile is a PEM file of the certificate authorities that sign the brokers'
	// certificates (KAFKA_TLS_CA_FILE; default the system's roots).
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the PEM client certificate and key for mutual TLS
	// (KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE; both or neither).
	TLSCertFile, TLSKeyFile string
	// TLSServerName is the name checked in the brokers' certificates
	// (KAFKA_TLS_SERVER_NAME; default the host of the broker being dialled).
	TLSServerName string
}

// kafkaSecurityVars lists the variables of [LoadKafkaSecurity], for [EnvVars].
func kafkaSecurityVars() []string {
	return []string{envKafkaSASLMechanism, envKafkaSASLUsername, envKafkaSASLPassword, envKafkaTLS,
		envKafkaTLSCAFile, envKafkaTLSCertFile, envKafkaTLSKeyFile, envKafkaTLSServerName}
}

// LoadKafkaSecurity reads the KAFKA_SASL_* and KAFKA_TLS* variables from env and records
// their problems in it (see [Env.Err]). The password is never quoted in an error.
func LoadKafkaSecurity(env *Env) KafkaSecurity {
	s := readKafkaSecurity(env)
	for _, p := range s.problems() {
		env.Fail(p.key, p.reason)
	}
	return s
}

// readKafkaSecurity reads the variables; [Config.problems] checks them.
func readKafkaSecurity(env *Env) KafkaSecurity {
	return KafkaSecurity{
		SASLMechanism: strings.ToUpper(env.String(envKafkaSASLMechanism, "")),
		SASLUsername:  env.String(envKafkaSASLUsername, ""),
		SASLPassword:  env.String(envKafkaSASLPassword, ""),
		TLS:           env.Bool(envKafkaTLS, false),
		TLSCAFile:     env.String(envKafkaTLSCAFile, ""),
		TLSCertFile:   env.String(envKafkaTLSCertFile, ""),
		TLSKeyFile:    env.String(envKafkaTLSKeyFile, ""),
		TLSServerName: env.String(envKafkaTLSServerName, ""),
	}
}

// Enabled reports whether s sets SASL or TLS.
func (s KafkaSecurity) Enabled() bool { return s.SASLMechanism != "" || s.TLS }

// String describes s without its password, for logs and errors, e.g.
// "SASL SCRAM-SHA-256 as \"order\", TLS on".
func (s KafkaSecurity) String() string {
	var b strings.Builder
	if s.SASLMechanism == "" {
		b.WriteString("no SASL")
	} else {
		fmt.Fprintf(&b, "SASL %s as %q", s.SASLMechanism, s.SASLUsername)
	}
	if s.TLS {
		b.WriteString(", TLS on")
		if s.TLSCertFile != "" {
			b.WriteString(" with client certificate")
		}
	} else {
		b.WriteString(", TLS off")
	}
	return b.String()
}

func (s KafkaSecurity) problems() []problem {
	var ps []problem
	switch strings.ToUpper(s.SASLMechanism) {
	case "":
		if s.SASLUsername != "" || s.SASLPassword != "" {
			ps = append(ps, problem{envKafkaSASLMechanism, "required when a SASL username or password is set (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"})
		}
	case saslPlain, saslScramSHA256, saslScramSHA512:
		if s.SASLUsername == "" {
			ps = append(ps, problem{envKafkaSASLUsername, "required with " + envKafkaSASLMechanism})
		}
		if s.SASLPassword == "" {
			ps = append(ps, problem{envKafkaSASLPassword, "required with " + envKafkaSASLMechanism})
		}
	default:
		ps = append(ps, problem{envKafkaSASLMechanism, "not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"})
	}
	if !s.TLS {
		for _, v := range []struct{ key, val string }{
			{envKafkaTLSCAFile, s.TLSCAFile}, {envKafkaTLSCertFile, s.TLSCertFile},
			{envKafkaTLSKeyFile, s.TLSKeyFile}, {envKafkaTLSServerName, s.TLSServerName},
		} {
			if v.val != "" {
				ps = append(ps, problem{v.key, "set but " + envKafkaTLS + " is off (set " + envKafkaTLS + "=on)"})
			}
		}
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		ps = append(ps, problem{envKafkaTLSCertFile, envKafkaTLSCertFile + " and " + envKafkaTLSKeyFile + " go together (mutual TLS)"})
	}
	return ps
}

// Options returns the franz-go options that make a client use s: kgo.DialTLSConfig
// and kgo.SASL. It reads the certificate files, so a missing or malformed file is
// reported here; every error matches [ErrInvalidConfig] and never contains the password.
func (s KafkaSecurity) Options() ([]kgo.Opt, error) {
	var errs []error
	for _, p := range s.problems() {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, p.key, p.reason))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS {
		tc, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToUpper(s.SASLMechanism) {
	case saslPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsMechanism()))
	case saslScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsSha256Mechanism()))
	case saslScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsSha512Mechanism()))
	}
	return opts, nil
}

func (s KafkaSecurity) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.TLSServerName}
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, envKafkaTLSCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s: %s holds no PEM certificate", ErrInvalidConfig, envKafkaTLSCAFile, s.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if s.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s/%s: %w", ErrInvalidConfig, envKafkaTLSCertFile, envKafkaTLSKeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// kafkaAuthHint says what to check when a client configured with s could not connect:
// a broker refusing SASL credentials closes the connection (EOF) without a reason.
func kafkaAuthHint(s KafkaSecurity, err error) string {
	switch {
	case s.SASLMechanism != "" && (errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF")):
		return " (the broker closed the connection during authentication: check " + envKafkaSASLMechanism + ", " +
			envKafkaSASLUsername + " and " + envKafkaSASLPassword + ")"
	case strings.Contains(err.Error(), "x509:") || strings.Contains(err.Error(), "tls:"):
		return " (TLS failed: check " + envKafkaTLSCAFile + ", " + envKafkaTLSCertFile + ", " + envKafkaTLSKeyFile +
			" and " + envKafkaTLSServerName + ")"
	}
	return " (is the broker up? check " + envKafkaBrokers + " and the KAFKA_SASL_* and KAFKA_TLS* variables)"
}
