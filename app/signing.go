package app

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/choreo-saga/choreo/event"
)

// Names of the event-signing variables of [LoadConfig].
const (
	// envSigningKeyFile names a PEM file with the Ed25519 private key (PKCS #8, as
	// `openssl genpkey -algorithm ed25519` writes it) the service signs every event of
	// its outbox with. Unset: events are not signed.
	envSigningKeyFile = "CHOREO_SIGNING_KEY_FILE"
	// envSigningKey is the same key inline, "ed25519:" and the standard base64 of its
	// 32-byte seed, for deployments that pass secrets as variables (set only one of
	// the two).
	envSigningKey = "CHOREO_SIGNING_KEY"
	// envTrustedKeys lists the sources whose events must be signed, and their keys:
	// comma-separated "source=key" entries, each key a file holding one or more PEM
	// "PUBLIC KEY" blocks (Ed25519, as `openssl pkey -pubout` writes them) or inline
	// "ed25519:" and the standard base64 of the 32-byte public key. A source may
	// appear several times; all its keys are accepted, which is how a key rotates.
	// Unset: no signature is required.
	envTrustedKeys = "CHOREO_TRUSTED_KEYS"
)

// Signing is what a service signs its events with and whose signatures it requires
// (see event.Signer, outbox.WithSigner and consumer.Router.TrustKeys).
type Signing struct {
	// Signer signs every event of the App's outbox (CHOREO_SIGNING_KEY_FILE; default
	// none). An outbox given with WithOutbox is the caller's: give it
	// outbox.WithSigner(cfg.Signing.Signer) yourself.
	Signer *event.Signer
	// TrustedKeys maps each source whose events every consumer of the App requires a
	// signature on to its keys (CHOREO_TRUSTED_KEYS; default none): such an event
	// without a valid signature by one of them is dead-lettered as "bad_signature"
	// (consumer.StandardConfig.TrustedKeys).
	TrustedKeys map[string]*event.KeySet
}

// Enabled reports whether the service signs or checks signatures.
func (s Signing) Enabled() bool { return s.Signer != nil || len(s.TrustedKeys) > 0 }

// readSigning reads the signing variables into c.Signing.
func (c *Config) readSigning(env *Env) {
	path, inline := env.String(envSigningKeyFile, ""), env.String(envSigningKey, "")
	switch {
	case path != "" && inline != "":
		env.Fail(envSigningKey, "set only one of "+envSigningKey+" and "+envSigningKeyFile)
	case path != "":
		s, err := loadSigner(path)
		if err != nil {
			env.Fail(envSigningKeyFile, err.Error())
		}
		c.Signing.Signer = s
	case inline != "":
		seed, err := inlineKey(inline, ed25519.SeedSize)
		if err == nil {
			c.Signing.Signer, err = event.NewEd25519Signer(ed25519.NewKeyFromSeed(seed))
		}
		if err != nil {
			env.Fail(envSigningKey, err.Error())
		}
	}
	if list := env.String(envTrustedKeys, ""); list != "" {
		keys, err := LoadTrustedKeys(list)
		if err != nil {
			env.Fail(envTrustedKeys, err.Error())
		}
		c.Signing.TrustedKeys = keys
	}
}

// loadSigner reads the Ed25519 private key of a PEM file (see envSigningKeyFile).
// The file must not be readable by other users than its owner's group.
func loadSigner(path string) (*event.Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("%s is readable by every user (mode %#o); chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := event.ParseSigner(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// inlineKey decodes "ed25519:<base64>" of n bytes.
func inlineKey(v string, n int) ([]byte, error) {
	b64, ok := strings.CutPrefix(v, event.AlgEd25519+":")
	if !ok {
		return nil, fmt.Errorf("not %s:<base64>", event.AlgEd25519)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != n {
		return nil, fmt.Errorf("%s:<base64> must hold %d bytes", event.AlgEd25519, n)
	}
	return b, nil
}

// inlineKeys returns the inline forms of s's key: the value of CHOREO_SIGNING_KEY and
// of a CHOREO_TRUSTED_KEYS entry's key (see envSigningKey, envTrustedKeys). It is
// for tools that generate keys.
func inlineKeys(priv ed25519.PrivateKey) (signing, trusted string) {
	enc := base64.StdEncoding.EncodeToString
	return event.AlgEd25519 + ":" + enc(priv.Seed()), event.AlgEd25519 + ":" + enc(priv.Public().(ed25519.PublicKey))
}

// LoadTrustedKeys reads a CHOREO_TRUSTED_KEYS list ("source=key,source=key", see
// envTrustedKeys) into a key set per source.
func LoadTrustedKeys(list string) (map[string]*event.KeySet, error) {
	bySource := map[string][]event.VerifyKey{}
	for _, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		source, path, ok := strings.Cut(entry, "=")
		if !ok || source == "" || path == "" {
			return nil, fmt.Errorf("%q is not source=key", entry)
		}
		if strings.HasPrefix(path, event.AlgEd25519+":") {
			pub, err := inlineKey(path, ed25519.PublicKeySize)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", source, err)
			}
			k, err := event.NewEd25519Key(pub)
			if err != nil {
				return nil, err
			}
			bySource[source] = append(bySource[source], k)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		keys, err := event.ParseKeys(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		bySource[source] = append(bySource[source], keys...)
	}
	out := make(map[string]*event.KeySet, len(bySource))
	for source, keys := range bySource {
		set, err := event.NewKeySet(keys...)
		if err != nil {
			return nil, err
		}
		out[source] = set
	}
	return out, nil
}
