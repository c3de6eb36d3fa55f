package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/internal/testenv"
)

// TestKafkaSecurity runs "dlq list" and "dlq show" against a broker that requires
// SCRAM-SHA-512 over mutual TLS with a CA generated for the test: configured from the
// environment (as the services are) or from flags, it works; with a wrong password it
// fails with exit 3 and an error naming the SASL settings, never the password; a
// malformed setting is a usage error.
func TestKafkaSecurity(t *testing.T) {
	const secret = "dlq-S3cret"
	f := testenv.TestTLS(t)
	c := testenv.KafkaCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "operator", secret),
		kfake.TLS(f.ServerConfig(true)), kfake.SeedTopics(1, "orders.events.dlq"))
	env := map[string]string{
		"KAFKA_BROKERS":        strings.Join(c.ListenAddrs(), ","),
		"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "operator", "KAFKA_SASL_PASSWORD": secret,
		"KAFKA_TLS": "on", "KAFKA_TLS_CA_FILE": f.CAFile,
		"KAFKA_TLS_CERT_FILE": f.ClientCertFile, "KAFKA_TLS_KEY_FILE": f.ClientKeyFile,
	}
	sec := app.LoadKafkaSecurity(app.MapEnv(env))
	opts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(c.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: "orders.events.dlq", Key: []byte("o-1"), Value: []byte(`{}`),
		Headers: []kgo.RecordHeader{{Key: "dlq_reason", Value: []byte("malformed")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}

	run1 := func(env map[string]string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append(args, "-timeout", "10s"),
			stdio{out: &out, err: &errb, getenv: func(k string) string { return env[k] }})
		return code, out.String(), errb.String()
	}
	if code, out, errs := run1(env, "dlq", "list"); code != exitOK || !strings.Contains(out, "orders.events.dlq") {
		t.Fatalf("dlq list from the environment: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := run1(env, "dlq", "show", "orders.events.dlq", "0:0"); code != exitOK || !strings.Contains(out, "o-1") {
		t.Fatalf("dlq show: exit %d\n%s%s", code, out, errs)
	}

	flags := []string{"-brokers", env["KAFKA_BROKERS"], "-kafka-sasl-mechanism", "scram-sha-512",
		"-kafka-sasl-username", "operator", "-kafka-sasl-password", secret, "-kafka-tls", "on",
		"-kafka-tls-ca-file", f.CAFile, "-kafka-tls-cert-file", f.ClientCertFile, "-kafka-tls-key-file", f.ClientKeyFile}
	if code, out, errs := run1(nil, append([]string{"dlq", "list"}, flags...)...); code != exitOK || !strings.Contains(out, "orders.events.dlq") {
		t.Fatalf("dlq list from flags: exit %d\n%s%s", code, out, errs)
	}

	wrong := map[string]string{}
	for k, v := range env {
		wrong[k] = v
	}
	wrong["KAFKA_SASL_PASSWORD"] = "not-" + secret
	code, out, errs := run1(wrong, "dlq", "list")
	if code != exitUnreachable || !strings.Contains(errs, `SASL SCRAM-SHA-512 as "operator"`) || !strings.Contains(errs, "-kafka-sasl") {
		t.Errorf("wrong password: exit %d, want %d and the SASL settings named\n%s%s", code, exitUnreachable, out, errs)
	}
	if strings.Contains(out+errs, secret) {
		t.Errorf("password printed:\n%s%s", out, errs)
	}

	code, _, errs = run1(env, "dlq", "list", "-kafka-sasl-mechanism", "GSSAPI")
	if code != exitUsage || !strings.Contains(errs, "KAFKA_SASL_MECHANISM") {
		t.Errorf("bad mechanism: exit %d: %s", code, errs)
	}
	plain := map[string]string{"KAFKA_BROKERS": env["KAFKA_BROKERS"]}
	if code, _, errs := run1(plain, "dlq", "list"); code != exitUnreachable {
		t.Errorf("plaintext client: exit %d, want %d: %s", code, exitUnreachable, errs)
	}
}
