package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

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

// EnvSASLPassword is the environment variable holding the password of every -sasl user
// that -sasl-password-file does not name.
const EnvSASLPassword = "DEVKAFKA_SASL_PASSWORD"

// securityFlags collects the flags before they are validated.
type securityFlags struct {
	users                     []saslUser // without passwords until build
	errs                      []error    // of -sasl, reported by build
	passwordFile              string
	certFile, keyFile, caFile string
}

// addSecurityFlags registers -sasl, -sasl-password-file, -tls-cert, -tls-key and
// -tls-client-ca on fs.
func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	sf := &securityFlags{}
	fs.Func("sasl", "require SASL and accept `mechanism:user` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; repeatable; "+
		"users are superusers, devkafka enforces no ACLs); the password comes from -sasl-password-file or $"+EnvSASLPassword,
		func(v string) error {
			if err := sf.addUser(v); err != nil {
				sf.errs = append(sf.errs, fmt.Errorf("-sasl #%d: %w", len(sf.users)+len(sf.errs)+1, err))
			}
			return nil
		})
	fs.StringVar(&sf.passwordFile, "sasl-password-file", "", "read the -sasl users' passwords from `file`: one user:password line each, "+
		"readable by its owner only (users it does not name take $"+EnvSASLPassword+")")
	fs.StringVar(&sf.certFile, "tls-cert", "", "serve TLS with this PEM certificate `file` (with -tls-key)")
	fs.StringVar(&sf.keyFile, "tls-key", "", "PEM private key `file` of -tls-cert")
	fs.StringVar(&sf.caFile, "tls-client-ca", "", "require client certificates signed by the CAs in this PEM `file` (mutual TLS)")
	return sf
}

// ErrPasswordInArgs refuses a -sasl value that carries a password: the command line
// of a process is visible to every user of the machine (ps, /proc/<pid>/cmdline).
var ErrPasswordInArgs = errors.New("takes mechanism:user, no password: a password on the command line shows in ps; " +
	"put user:password in -sasl-password-file or the password in $" + EnvSASLPassword)

// addUser parses one -sasl value; its errors never quote it.
func (sf *securityFlags) addUser(v string) error {
	mech, user, ok := strings.Cut(v, ":")
	mech = strings.ToUpper(strings.TrimSpace(mech))
	switch {
	case strings.Contains(user, ":"):
		return ErrPasswordInArgs
	case !ok || user == "":
		return errors.New("want mechanism:user")
	}
	switch mech {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
	}
	sf.users = append(sf.users, saslUser{mechanism: mech, user: user})
	return nil
}

// passwords gives every -sasl user its password: from -sasl-password-file, else from
// $DEVKAFKA_SASL_PASSWORD. Its errors never quote a password.
func (sf *securityFlags) passwords() error {
	byUser := map[string]string{}
	if sf.passwordFile != "" {
		if len(sf.users) == 0 {
			return errors.New("-sasl-password-file needs -sasl users")
		}
		var err error
		if byUser, err = readPasswordFile(sf.passwordFile); err != nil {
			return fmt.Errorf("-sasl-password-file: %w", err)
		}
	}
	env := os.Getenv(EnvSASLPassword)
	declared := map[string]bool{}
	for i := range sf.users {
		u := &sf.users[i]
		declared[u.user] = true
		u.pass = byUser[u.user]
		if u.pass == "" {
			u.pass = env
		}
		if u.pass == "" {
			return fmt.Errorf("-sasl user %q has no password: give it a line in -sasl-password-file or set $%s", u.user, EnvSASLPassword)
		}
	}
	for user := range byUser {
		if !declared[user] {
			return fmt.Errorf("-sasl-password-file names user %q, which no -sasl flag declares", user)
		}
	}
	return nil
}

// readPasswordFile reads user:password lines (blank lines and lines starting with #
// are skipped) from a file that only its owner may read.
func readPasswordFile(path string) (map[string]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by other users (mode %04o): chmod 600 it", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, pass, ok := strings.Cut(line, ":")
		if !ok || user == "" || pass == "" {
			return nil, fmt.Errorf("%s line %d: want user:password", path, n+1)
		}
		if _, dup := out[user]; dup {
			return nil, fmt.Errorf("%s line %d: user %q again", path, n+1, user)
		}
		out[user] = pass
	}
	return out, nil
}

// build validates the flags, reads the passwords and loads the certificate files.
func (sf *securityFlags) build() (security, error) {
	var s security
	if err := errors.Join(sf.errs...); err != nil {
		return s, err
	}
	if err := sf.passwords(); err != nil {
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
