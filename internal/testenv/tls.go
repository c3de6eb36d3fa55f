package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are PEM files of a throwaway certificate authority generated for one test,
// with a server certificate (for localhost and 127.0.0.1) and a client certificate both
// signed by it. They live in the test's temporary directory.
type TLSFiles struct {
	// CAFile is the CA certificate.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate and private key.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (for mutual TLS) and its key.
	ClientCertFile, ClientKeyFile string
	// CA is the CA certificate, parsed.
	CA *x509.Certificate
	// Server is the server's key pair.
	Server tls.Certificate
}

// TestTLS generates a CA, a server and a client certificate and writes them as PEM files
// under t.TempDir().
func TestTLS(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "choreo test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testenv: parse CA certificate: %v", err)
	}
	f := TLSFiles{CA: ca, CAFile: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.CAFile, "CERTIFICATE", caDER)

	issue := func(serial int64, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("testenv: %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatalf("testenv: %s key: %v", name, err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	f.ServerCertFile, f.ServerKeyFile = issue(2, "server", x509.ExtKeyUsageServerAuth)
	f.ClientCertFile, f.ClientKeyFile = issue(3, "client", x509.ExtKeyUsageClientAuth)
	if f.Server, err = tls.LoadX509KeyPair(f.ServerCertFile, f.ServerKeyFile); err != nil {
		t.Fatalf("testenv: load server key pair: %v", err)
	}
	return f
}

// ServerConfig returns a TLS configuration serving the server certificate; with
// requireClientCert, clients must present a certificate signed by the CA.
func (f TLSFiles) ServerConfig(requireClientCert bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{f.Server}, MinVersion: tls.VersionTLS12}
	if requireClientCert {
		pool := x509.NewCertPool()
		pool.AddCert(f.CA)
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: generate key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testenv: write %s: %v", path, err)
	}
}
