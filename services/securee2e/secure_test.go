package securee2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/chaos"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// hangGuard bounds every wait; it turns a hang into a failure and is no performance
// assertion.
const hangGuard = 80 * time.Second

func secret(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// output collects a process's stdout and stderr.
type output struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// proc is a child process with only the environment it is given (and PATH, HOME).
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *output
	done chan struct{}
}

func baseEnv() []string { return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")} }

func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &output{}, done: make(chan struct{})}
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// stop sends SIGTERM and returns the exit code (-1 if it had to be killed).
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(hangGuard):
		t.Errorf("%s did not exit after SIGTERM; output:\n%s", p.name, p.out)
		_ = p.cmd.Process.Kill()
		<-p.done
		return -1
	}
}

// wait waits for the process to exit on its own.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(hangGuard):
		t.Fatalf("%s did not exit; output:\n%s", p.name, p.out)
		return -1
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecuredDeployment: see the package documentation.
func TestSecuredDeployment(t *testing.T) {
	ctx := context.Background()
	kafkaPW, redisPW, apiToken := secret("kafka-pw-"), secret("redis-pw-"), secret("api-token-")
	secrets := []string{kafkaPW, redisPW, apiToken}
	var captured []*output // every log and output, grepped for the secrets at the end
	var errs []string

	began := time.Now()
	bins, err := chaos.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built the binaries in %s", time.Since(began).Round(time.Millisecond))
	bin := func(name string) string { return filepath.Join(bins, name) }
	f := testenv.TestTLS(t)

	// devkafka requiring SCRAM-SHA-256 over TLS, its topics created at start.
	kafkaAddr := freeAddr(t)
	_, kport, _ := net.SplitHostPort(kafkaAddr)
	var topics []string
	for _, tp := range events.Topics {
		topics = append(topics, tp, consumer.DeadLetterTopic(tp))
	}
	broker := start(t, "devkafka", bin("devkafka"), []string{"DEVKAFKA_SASL_PASSWORD=" + kafkaPW}, "-port", kport, "-data-dir", "", "-partitions", "2",
		"-topics", strings.Join(topics, ","), "-sasl", "SCRAM-SHA-256:choreo",
		"-tls-cert", f.ServerCertFile, "-tls-key", f.ServerKeyFile)
	captured = append(captured, broker.out)
	waitFor(t, "devkafka listening", func() (bool, string) {
		return strings.Contains(broker.out.String(), "devkafka listening"), broker.out.String()
	})
	redisAddr := testenv.RedisServer(t, redisPW, nil)

	kafkaEnv := []string{
		"KAFKA_BROKERS=" + kafkaAddr, "KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "KAFKA_SASL_USERNAME=choreo",
		"KAFKA_SASL_PASSWORD=" + kafkaPW, "KAFKA_TLS=on", "KAFKA_TLS_CA_FILE=" + f.CAFile,
	}
	type service struct {
		name, http, admin string
		env               []string
		p                 *proc
	}
	services := []*service{{name: "payment"}, {name: "inventory"}, {name: "order"}}
	for _, s := range services {
		s.http, s.admin = freeAddr(t), freeAddr(t)
		s.env = append([]string{
			"DATABASE_URL=" + testenv.PostgresDSN(t), "DATABASE_MAX_CONNS=6",
			"REDIS_URL=redis://:" + redisPW + "@" + redisAddr + "/0",
			"KAFKA_PARTITIONS=2", "HTTP_ADDR=" + s.http, "ADMIN_ADDR=" + s.admin, "SHUTDOWN_TIMEOUT=20s",
			"ORDER_API_TOKEN=" + apiToken, "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none",
		}, kafkaEnv...)
	}

	// A wrong Kafka password, then a wrong Redis password: the order service refuses to
	// start, naming what is wrong and not the password.
	order := services[2]
	for _, tc := range []struct{ name, set, want string }{
		{"wrong Kafka password", "KAFKA_SASL_PASSWORD=wrong-" + kafkaPW, "KAFKA_SASL_PASSWORD"},
		{"wrong Redis password", "REDIS_URL=redis://:wrong-" + redisPW + "@" + redisAddr + "/0", "REDIS_URL"},
	} {
		p := start(t, "order ("+tc.name+")", bin("order"), append(append([]string(nil), order.env...), tc.set))
		code := p.wait(t)
		captured = append(captured, p.out)
		if code == 0 || !strings.Contains(p.out.String(), tc.want) {
			t.Errorf("%s: exit %d, output does not name %s:\n%s", tc.name, code, tc.want, p.out)
		}
		t.Logf("%s: exit %d: %s", tc.name, code, lastLine(p.out.String()))
	}

	for _, s := range services {
		s.p = start(t, s.name, bin(s.name), s.env)
		captured = append(captured, s.p.out)
	}
	hc := &http.Client{Timeout: 20 * time.Second}
	for _, s := range services {
		waitFor(t, s.name+" ready", func() (bool, string) {
			select {
			case <-s.p.done:
				t.Fatalf("%s exited:\n%s", s.name, s.p.out)
			default:
			}
			resp, err := hc.Get("http://" + s.admin + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, string(body)
		})
	}
	orderURL := "http://" + order.http
	t.Logf("system ready after %s", time.Since(began).Round(time.Millisecond))

	// Slow and oversized requests, started first: the server must cut them off.
	var slow sync.WaitGroup
	for _, tc := range []struct{ name, send string }{
		{"headers never finished", "POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"},
		{"headers then a stalled body", "POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + apiToken +
			"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"customer_id\":"},
	} {
		slow.Go(func() {
			c, err := net.Dial("tcp", order.http)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Error(err)
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(hangGuard))
			// The server answers (408/400) or just closes; either way the read ends with
			// EOF, not with our deadline.
			resp, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s: the connection is still open after %s", tc.name, hangGuard)
				return
			}
			t.Logf("%s: cut off by the server (%q)", tc.name, firstLine(string(resp)))
		})
	}
	authed := func(method, path, body string, hdr map[string]string) (int, []byte) {
		req, _ := http.NewRequest(method, orderURL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := authed("POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"sku-1","qty":1}],"amount":100,"x":"`+strings.Repeat("a", ordersvc.MaxBodyBytes)+`"}`, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d, want 413", code)
	}
	if code, _ := authed("GET", "/orders", "", map[string]string{"X-Big": strings.Repeat("b", 2*app.DefaultMaxHeaderBytes)}); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized headers: %d, want 431", code)
	}
	if resp, err := hc.Post(orderURL+"/orders", "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /orders without the token: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// An order saga completes.
	getOrder := func(id string) ordersvc.OrderJSON {
		code, b := authed("GET", "/orders/"+id, "", nil)
		var o ordersvc.OrderJSON
		if err := json.Unmarshal(b, &o); err != nil || code != http.StatusOK {
			t.Fatalf("GET order %s: %d %s", id, code, b)
		}
		return o
	}
	create := func(customer string) string {
		code, b := authed("POST", "/orders", fmt.Sprintf(`{"customer_id":%q,"items":[{"sku":"sku-1","qty":1}],"amount":1500}`, customer), nil)
		var o ordersvc.OrderJSON
		if err := json.Unmarshal(b, &o); err != nil || code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, b)
		}
		return o.ID
	}
	okID := create("c-1")
	waitFor(t, "order "+okID+" CONFIRMED", func() (bool, string) {
		o := getOrder(okID)
		return o.State == ordersvc.Confirmed, string(o.State)
	})

	// sagactl, configured from the same variables: its order view, a small load run
	// whose orders all settle, and the dead-letter listing below.
	sagactl := func(args ...string) (int, string) {
		p := start(t, "sagactl "+strings.Join(args, " "), bin("sagactl"),
			append([]string{"ORDER_URL=" + orderURL, "ORDER_API_TOKEN=" + apiToken}, kafkaEnv...), args...)
		code := p.wait(t)
		captured = append(captured, p.out)
		return code, p.out.String()
	}
	if code, out := sagactl("order", okID); code != 0 || !strings.Contains(out, "CONFIRMED") {
		t.Errorf("sagactl order: exit %d:\n%s", code, out)
	}
	if code, out := sagactl("load", "-n", "4", "-rate", "20", "-mix", "success=100", "-wait", "60s"); code != 0 {
		t.Errorf("sagactl load: exit %d:\n%s", code, out)
	}

	// Forged events against an order the payment service holds (customer c-hang): a
	// payment.authorized from source "evil", and the inventory's stock.reserved on the
	// payments topic. Both are dead-lettered as untrusted; the order does not move.
	heldID := create("c-hang")
	sec := app.KafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUsername: "choreo", SASLPassword: kafkaPW,
		TLS: true, TLSCAFile: f.CAFile}
	kopts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(kopts, kgo.SeedBrokers(kafkaAddr),
		kgo.ConsumeTopics(consumer.DeadLetterTopic(events.TopicPayments)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	items := []events.Item{{SKU: "sku-1", Qty: 1}}
	for _, fe := range []struct {
		source, typ string
		data        any
	}{
		{"evil", events.PaymentAuthorized, events.PaymentV1{OrderID: heldID, CustomerID: "c-hang", Amount: 1500, Items: items}},
		{events.SourceInventory, events.StockReserved, events.StockV1{OrderID: heldID, Items: items}},
	} {
		rec, err := event.ToRecord(events.TopicPayments, apptest.NewEvent(t, fe.source, fe.typ, heldID, fe.data))
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = cl.ProduceSync(pctx, rec).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	untrusted := map[string]bool{}
	waitFor(t, "both forged events dead-lettered", func() (bool, string) {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		cl.PollFetches(fctx).EachRecord(func(r *kgo.Record) {
			var reason, typ string
			for _, h := range r.Headers {
				switch h.Key {
				case consumer.HeaderDLQReason:
					reason = string(h.Value)
				case "ce_type":
					typ = string(h.Value)
				}
			}
			if string(r.Key) == heldID && reason == consumer.ReasonUntrusted {
				untrusted[typ] = true
			}
		})
		return len(untrusted) == 2, fmt.Sprint(untrusted)
	})
	if code, out := sagactl("dlq", "list", events.TopicPayments); code != 0 || !strings.Contains(out, consumer.ReasonUntrusted) {
		t.Errorf("sagactl dlq list: exit %d, no %q:\n%s", code, consumer.ReasonUntrusted, out)
	}
	if o := getOrder(heldID); o.State != ordersvc.Pending || len(o.History) != 1 || o.PaymentStatus != "none" {
		t.Errorf("held order after forged events: %s, payment %s, %d history entries; want PENDING, none, 1", o.State, o.PaymentStatus, len(o.History))
	}

	t.Logf("saga, sagactl and forgeries done after %s", time.Since(began).Round(time.Millisecond))
	slow.Wait()
	t.Logf("slow requests cut off after %s", time.Since(began).Round(time.Millisecond))
	// Services first, then the broker: their final commits must succeed.
	for i := len(services) - 1; i >= 0; i-- {
		s := services[i]
		if code := s.p.stop(t); code != 0 {
			t.Errorf("%s exited %d:\n%s", s.name, code, s.p.out)
		}
	}
	if code := broker.stop(t); code != 0 {
		t.Errorf("devkafka exited %d:\n%s", code, broker.out)
	}
	for _, s := range services {
		if strings.Contains(s.p.out.String(), "connection refused") {
			t.Errorf("%s logged a refused connection during the ordered shutdown:\n%s", s.name, s.p.out)
		}
	}

	for _, o := range captured {
		errs = append(errs, o.String())
	}
	all := strings.Join(errs, "\n")
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("a secret (%s…) appears in the captured logs and outputs", s[:10])
		}
	}
	t.Logf("grepped %d bytes of logs and outputs of %d processes for %d secrets", len(all), len(captured), len(secrets))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
