package app_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/lock"
)

const kafkaSecret = "s3cret-Kafka-pw" // must never appear in an error or a log

func TestKafkaSecurityConfig(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want []string // each in the error; none: valid
	}{
		{"none", map[string]string{}, nil},
		{"scram", map[string]string{"KAFKA_SASL_MECHANISM": "scram-sha-512", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": kafkaSecret}, nil},
		{"unknown mechanism", map[string]string{"KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": kafkaSecret},
			[]string{"KAFKA_SASL_MECHANISM", "SCRAM-SHA-256"}},
		{"no password", map[string]string{"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "u"},
			[]string{"KAFKA_SASL_PASSWORD" + ": required"}},
		{"password without mechanism", map[string]string{"KAFKA_SASL_PASSWORD": kafkaSecret},
			[]string{"KAFKA_SASL_MECHANISM" + ": required"}},
		{"tls file with tls off", map[string]string{"KAFKA_TLS_CA_FILE": "/ca.pem"},
			[]string{"KAFKA_TLS_CA_FILE", "KAFKA_TLS=on"}},
		{"cert without key", map[string]string{"KAFKA_TLS": "on", "KAFKA_TLS_CERT_FILE": "/c.pem"},
			[]string{"KAFKA_TLS_KEY_FILE" + " go together"}},
		{"tls not a boolean", map[string]string{"KAFKA_TLS": "maybe"}, []string{"KAFKA_TLS"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := app.MapEnv(tc.env)
			cfg := app.LoadConfig(env, "widget", ":8080")
			if tc.want == nil {
				if err := env.Err(); err != nil {
					t.Fatal(err)
				}
				return
			}
			apptest.WantConfigError(t, env, tc.want...)
			if tc.name == "tls not a boolean" {
				return // a parse error: the Config holds the default
			}
			if err := cfg.Validate(); !errors.Is(err, app.ErrInvalidConfig) {
				t.Errorf("Validate = %v", err)
			}
			if _, err := cfg.KafkaSecurity.Options(); !errors.Is(err, app.ErrInvalidConfig) {
				t.Errorf("Options = %v", err)
			}
			sec := app.LoadKafkaSecurity(app.MapEnv(tc.env))
			for _, e := range []string{env.Err().Error(), sec.String()} {
				if strings.Contains(e, kafkaSecret) {
					t.Errorf("password in %q", e)
				}
			}
		})
	}
	for _, v := range []string{"KAFKA_SASL_MECHANISM", "KAFKA_SASL_PASSWORD", "KAFKA_TLS_SERVER_NAME"} {
		if !strings.Contains(strings.Join(app.EnvVars(), " "), v) {
			t.Errorf("EnvVars lacks %s", v)
		}
	}

	// Files that are missing or hold no certificate are reported by Options.
	f := testenv.TestTLS(t)
	for _, s := range []app.KafkaSecurity{
		{TLS: true, TLSCAFile: f.CAFile + ".missing"},
		{TLS: true, TLSCAFile: f.ClientKeyFile},
		{TLS: true, TLSCertFile: f.ClientCertFile, TLSKeyFile: f.ServerKeyFile},
	} {
		if _, err := s.Options(); !errors.Is(err, app.ErrInvalidConfig) {
			t.Errorf("%+v: Options = %v, want ErrInvalidConfig", s, err)
		}
	}
}

// secureBroker starts a kfake broker that requires SCRAM-SHA-256 over mutual TLS, with
// a CA generated for the test, and returns it with the settings of a client it accepts.
func secureBroker(t *testing.T) ([]string, app.KafkaSecurity) {
	t.Helper()
	f := testenv.TestTLS(t)
	c := testenv.KafkaCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "widget", kafkaSecret),
		kfake.TLS(f.ServerConfig(true)))
	return c.ListenAddrs(), app.KafkaSecurity{
		SASLMechanism: "SCRAM-SHA-256", SASLUsername: "widget", SASLPassword: kafkaSecret,
		TLS: true, TLSCAFile: f.CAFile, TLSCertFile: f.ClientCertFile, TLSKeyFile: f.ClientKeyFile,
		TLSServerName: "localhost",
	}
}

func ping(t *testing.T, brokers []string, s app.KafkaSecurity) error {
	t.Helper()
	opts, err := s.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// TestKafkaSecurityOptions: the options of KafkaSecurity pass a broker requiring SASL
// over mutual TLS with the right settings, and each wrong one is refused.
func TestKafkaSecurityOptions(t *testing.T) {
	brokers, good := secureBroker(t)
	if err := ping(t, brokers, good); err != nil {
		t.Fatalf("right settings refused: %v", err)
	}
	for _, m := range []string{"PLAIN", "SCRAM-SHA-512"} {
		f := testenv.TestTLS(t)
		c := testenv.KafkaCluster(t, kfake.EnableSASL(), kfake.Superuser(m, "u", kafkaSecret), kfake.TLS(f.ServerConfig(false)))
		s := app.KafkaSecurity{SASLMechanism: m, SASLUsername: "u", SASLPassword: kafkaSecret, TLS: true, TLSCAFile: f.CAFile}
		if err := ping(t, c.ListenAddrs(), s); err != nil {
			t.Errorf("%s refused: %v", m, err)
		}
	}
	bad := map[string]func(s *app.KafkaSecurity){
		"wrong password":   func(s *app.KafkaSecurity) { s.SASLPassword = "wrong" },
		"wrong user":       func(s *app.KafkaSecurity) { s.SASLUsername = "mallory" },
		"wrong mechanism":  func(s *app.KafkaSecurity) { s.SASLMechanism = "SCRAM-SHA-512" },
		"no client cert":   func(s *app.KafkaSecurity) { s.TLSCertFile, s.TLSKeyFile = "", "" },
		"unknown CA":       func(s *app.KafkaSecurity) { s.TLSCAFile = "" },
		"wrong ServerName": func(s *app.KafkaSecurity) { s.TLSServerName = "kafka.example.com" },
		"plaintext":        func(s *app.KafkaSecurity) { *s = app.KafkaSecurity{} },
	}
	for name, change := range bad {
		s := good
		change(&s)
		if err := ping(t, brokers, s); err == nil {
			t.Errorf("%s: broker accepted the client", name)
		}
	}
}

// TestAppKafkaSecurity runs an App against a broker requiring SCRAM over mutual TLS,
// configured only from the KAFKA_* variables: with a wrong password New fails with a
// clear error that does not contain it; with the right one a consumer of App.Consume
// reads an event and the relay publishes the handler's reply, so the consumers' clients
// and the producer both carry the settings.
func TestAppKafkaSecurity(t *testing.T) {
	ctx := context.Background()
	brokers, sec := secureBroker(t)
	vars := map[string]string{
		"DATABASE_URL": freshDSN(t), "REDIS_ADDR": testenv.RedisAddr(t),
		"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_PARTITIONS": "1",
		"KAFKA_SASL_MECHANISM": "scram-sha-256", "KAFKA_SASL_USERNAME": sec.SASLUsername,
		"KAFKA_SASL_PASSWORD": "wrong-" + kafkaSecret, "KAFKA_TLS": "on",
		"KAFKA_TLS_CA_FILE": sec.TLSCAFile, "KAFKA_TLS_CERT_FILE": sec.TLSCertFile, "KAFKA_TLS_KEY_FILE": sec.TLSKeyFile,
	}
	load := func() app.Config {
		env := app.MapEnv(vars)
		cfg := app.LoadConfig(env, "widget", "127.0.0.1:0")
		if err := env.Err(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	_, rdbNS := testenv.Redis(t)
	logs := &apptest.LogBuffer{}
	_, err := app.New(ctx, "", app.WithConfig(load()), app.WithLogOutput(logs), app.WithoutSignals())
	if err == nil {
		t.Fatal("New accepted a wrong Kafka password")
	}
	for _, want := range []string{"SASL SCRAM-SHA-256", `"widget"`, "KAFKA_SASL_PASSWORD"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error()+logs.String(), kafkaSecret) {
		t.Errorf("password in error or logs: %v\n%s", err, logs)
	}

	vars["KAFKA_SASL_PASSWORD"] = kafkaSecret
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(ctx, "", app.WithConfig(load()), app.WithLogOutput(logs), app.WithoutSignals(), app.WithListener(ln),
		app.WithLockOptions(lock.WithNamespace(rdbNS)))
	if err != nil {
		t.Fatalf("New with the right password: %v", err)
	}
	if err := a.EnsureTopics(ctx, "widgets.in", "widgets.out"); err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		out, err := event.New("widget", "widget.pong", ev.Subject, map[string]string{})
		if err != nil {
			return err
		}
		return a.Outbox.Enqueue(ctx, tx, "widgets.out", out)
	}
	if err := a.Consume(app.ConsumerSpec{Group: "widget", Topics: []string{"widgets.in"}, Handler: h}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	<-a.Ready()

	opts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("widgets.out"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ping, _ := event.New("test", "widget.ping", "w-1", map[string]string{})
	rec, err := event.ToRecord("widgets.in", ping)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := cl.ProduceSync(pctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := ""
	for got == "" {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("no reply on widgets.out: %v\n%s", fs.Errors(), logs)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if ev, err := event.FromRecord(r); err == nil {
				got = ev.Type
			}
		})
	}
	if got != "widget.pong" {
		t.Errorf("reply %s, want widget.pong", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), kafkaSecret) {
		t.Error("password in the logs")
	}
}

// TestBrokerACLsAreTheBoundary: with ACLs on, a SASL principal may write only the topics
// it is granted. The payment service's principal writes payments.events; another
// authenticated principal is refused with TOPIC_AUTHORIZATION_FAILED. This, not the
// ce_source a record claims (consumer.Router.Trust), is what keeps forged events out.
func TestBrokerACLsAreTheBoundary(t *testing.T) {
	const topic = "payments.events"
	write := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral,
			Operation: op, Allow: true}
	}
	c := testenv.KafkaCluster(t, kfake.EnableSASL(), kfake.EnableACLs(), kfake.SeedTopics(1, topic),
		kfake.Superuser("SCRAM-SHA-256", "admin", kafkaSecret),
		kfake.User("SCRAM-SHA-256", "payment", kafkaSecret, write(kmsg.ACLOperationWrite), write(kmsg.ACLOperationDescribe)),
		kfake.User("SCRAM-SHA-256", "inventory", kafkaSecret))
	produce := func(user string) error {
		s := app.KafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUsername: user, SASLPassword: kafkaSecret}
		opts, err := s.Options()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordRetries(2))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("o-1"), Value: []byte(`{}`)}).FirstErr()
	}
	if err := produce("payment"); err != nil {
		t.Fatalf("payment principal refused on its own topic: %v", err)
	}
	if err := produce("inventory"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("inventory principal writing %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, err)
	}
}
