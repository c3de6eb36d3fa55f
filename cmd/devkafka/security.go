package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// security is the parsed -sasl and -tls-* flags: the SASL users the broker accepts and
// the certificate it serves.
type security struct {
	users  []saslUser
	tls    *tls.Config // served by the guard's listener (devbroker.WithTLS), not kfake.TLS
	mtls   bool
	kfake  []kfake.Opt // SASL users
	labels []string    // for the "listening" log line, without passwords
}

type saslUser struct{ mechanism, user, pass string }

// securityFlags collects the flags before they are validated.
type securityFlags struct {
	users                     []saslUser
	errs                      []error // of -sasl, reported by build: the flag package would quote the password
	certFile, keyFile, caFile string
}

// addSecurityFlags registers -sasl, -tls-cert, -tls-key and -tls-client-ca on fs.
func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	sf := &securityFlags{}
	fs.Func("sasl", "require SASL and accept `mechanism:user:password` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; "+
		"repeatable; users are superusers, devkafka enforces no ACLs)", func(v string) error {
		if err := sf.addUser(v); err != nil {
			sf.errs = append(sf.errs, fmt.Errorf("-sasl #%d: %w", len(sf.users)+len(sf.errs)+1, err))
		}
		return nil
	})
	fs.StringVar(&sf.certFile, "tls-cert", "", "serve TLS with this PEM certificate `file` (with -tls-key)")
	fs.StringVar(&sf.keyFile, "tls-key", "", "PEM private key `file` of -tls-cert")
	fs.StringVar(&sf.caFile, "tls-client-ca", "", "require client certificates signed by the CAs in this PEM `file` (mutual TLS)")
	return sf
}

// addUser parses one -sasl value; its errors never quote it.
func (sf *securityFlags) addUser(v string) error {
	mech, rest, ok1 := strings.Cut(v, ":")
	user, pass, ok2 := strings.Cut(rest, ":")
	mech = strings.ToUpper(strings.TrimSpace(mech))
	if !ok1 || !ok2 || user == "" || pass == "" {
		return errors.New("want mechanism:user:password")
	}
	switch mech {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
	}
	sf.users = append(sf.users, saslUser{mech, user, pass})
	return nil
}

// build validates the flags and loads the certificate files.
func (sf *securityFlags) build() (security, error) {
	var s security
	if err := errors.Join(sf.errs...); err != nil {
		return s, err
	}
	for _, u := range sf.users {
		s.users = append(s.users, u)
		s.kfake = append(s.kfake, kfake.Superuser(u.mechanism, u.user, u.pass))
		s.labels = append(s.labels, u.mechanism+":"+u.user)
	}
	if len(sf.users) > 0 {
		s.kfake = append(s.kfake, kfake.EnableSASL())
	}
	if (sf.certFile == "") != (sf.keyFile == "") {
		return s, errors.New("-tls-cert and -tls-key go together")
	}
	if sf.certFile == "" {
		if sf.caFile != "" {
			return s, errors.New("-tls-client-ca needs -tls-cert and -tls-key")
		}
		return s, nil
	}
	cert, err := tls.LoadX509KeyPair(sf.certFile, sf.keyFile)
	if err != nil {
		return s, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if sf.caFile != "" {
		pem, err := os.ReadFile(sf.caFile)
		if err != nil {
			return s, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return s, fmt.Errorf("-tls-client-ca: %s holds no PEM certificate", sf.caFile)
		}
		s.tls.ClientCAs = pool
		s.tls.ClientAuth = tls.RequireAndVerifyClientCert
		s.mtls = true
	}
	return s, nil
}

// guardClient returns the SASL option of the guard's own client (devbroker): the
// credentials of the first -sasl user, or none.
func (s security) guardClient() []kgo.Opt {
	if len(s.users) == 0 {
		return nil
	}
	u := s.users[0]
	switch u.mechanism {
	case "PLAIN":
		return []kgo.Opt{kgo.SASL(plain.Auth{User: u.user, Pass: u.pass}.AsMechanism())}
	case "SCRAM-SHA-512":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: u.user, Pass: u.pass}.AsSha512Mechanism())}
	default:
		return []kgo.Opt{kgo.SASL(scram.Auth{User: u.user, Pass: u.pass}.AsSha256Mechanism())}
	}
}

// enabled reports whether clients must authenticate or use TLS.
func (s security) enabled() bool { return len(s.users) > 0 || s.tls != nil }

// describe names the broker's requirements for the "listening" log line.
func (s security) describe() string {
	var parts []string
	if len(s.labels) > 0 {
		parts = append(parts, "SASL "+strings.Join(s.labels, ","))
	}
	switch {
	case s.mtls:
		parts = append(parts, "mutual TLS")
	case s.tls != nil:
		parts = append(parts, "TLS")
	}
	if len(parts) == 0 {
		return "plaintext, no authentication"
	}
	return strings.Join(parts, ", ")
}

// seedTopicsDirect creates the topics that do not exist yet through the cluster itself,
// for a broker whose clients must authenticate (devkafka holds no client credentials).
func seedTopicsDirect(c *kfake.Cluster, partitions int, topics []string) ([]string, error) {
	var created []string
	for _, t := range topics {
		err := c.CreateTopic(t, int32(partitions), nil)
		switch {
		case err == nil:
			created = append(created, t)
		case errors.Is(err, kerr.TopicAlreadyExists):
		default:
			return created, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return created, nil
}
