package app

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/event"
)

// writeKey writes a fresh Ed25519 key pair as PEM files in dir and returns their paths.
func writeKey(t *testing.T, dir, name string) (privPath, pubPath string, s *event.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	privPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ = event.NewEd25519Signer(priv)
	pub, err := s.Key().MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	pubPath = filepath.Join(dir, name+".pub")
	if err := os.WriteFile(pubPath, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return privPath, pubPath, s
}

func TestLoadConfigSigning(t *testing.T) {
	dir := t.TempDir()
	orderKey, orderPub, order := writeKey(t, dir, "order")
	_, payPub, pay := writeKey(t, dir, "payment")
	_, payNext, payNew := writeKey(t, dir, "payment-next")

	env := MapEnv(map[string]string{
		envSigningKeyFile: orderKey,
		envTrustedKeys:    "order=" + orderPub + ", payment=" + payPub + ",payment=" + payNext,
	})
	c := LoadConfig(env, "order", ":8080")
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if c.Signing.Signer == nil || c.Signing.Signer.KeyID() != order.KeyID() {
		t.Fatalf("signer %v, want key %s", c.Signing.Signer, order.KeyID())
	}
	ids := c.Signing.TrustedKeys["payment"].IDs()
	if len(c.Signing.TrustedKeys) != 2 || len(ids) != 2 || !strings.Contains(strings.Join(ids, " "), pay.KeyID()) ||
		!strings.Contains(strings.Join(ids, " "), payNew.KeyID()) {
		t.Fatalf("trusted keys %v (payment %v)", c.Signing.TrustedKeys, ids)
	}

	// A private key readable by everyone, a private key among trusted keys, a missing
	// file and a malformed entry are configuration errors naming their variable.
	if err := os.Chmod(orderKey, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ key, value, want string }{
		"world-readable key":  {envSigningKeyFile, orderKey, "chmod 600"},
		"private key trusted": {envTrustedKeys, "order=" + orderKey, "private key"},
		"missing file":        {envTrustedKeys, "order=" + filepath.Join(dir, "nope.pub"), "no such file"},
		"no source":           {envTrustedKeys, orderPub, "not source=key"},
		"both forms":          {envSigningKey, "ed25519:AAAA", "set only one"},
		"short inline key":    {envTrustedKeys, "order=ed25519:AAAA", "must hold 32 bytes"},
	} {
		vars := map[string]string{tc.key: tc.value}
		if tc.key == envSigningKey {
			vars[envSigningKeyFile] = orderKey
		}
		env := MapEnv(vars)
		LoadConfig(env, "order", ":8080")
		if err := env.Err(); err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s and %q", name, err, tc.key, tc.want)
		}
	}
}

// TestLoadConfigInlineKeys: the inline forms (compose passes keys as variables) give
// the same keys as the files.
func TestLoadConfigInlineKeys(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signing, trusted := inlineKeys(priv)
	env := MapEnv(map[string]string{envSigningKey: signing, envTrustedKeys: "payment=" + trusted})
	c := LoadConfig(env, "payment", ":8081")
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	ids := c.Signing.TrustedKeys["payment"].IDs()
	if c.Signing.Signer == nil || len(ids) != 1 || ids[0] != c.Signing.Signer.KeyID() {
		t.Fatalf("signer %v, trusted %v", c.Signing.Signer, ids)
	}
	// The inline private key is a secret: errors never quote it.
	env = MapEnv(map[string]string{envSigningKey: "ed25519:c2VjcmV0"})
	LoadConfig(env, "payment", ":8081")
	if err := env.Err(); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("error %v quotes the key", err)
	}
}
