package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/events"
	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
	"github.com/choreo-saga/choreo/services/payment/paymentsvc"
	"github.com/choreo-saga/choreo/tracing"
)

// root is the repository root, where docker-compose.yml and the Dockerfile live.
const root = ".."

// appServices are the compose services built from the Dockerfile, with the function that
// loads each one's configuration exactly as its main.go does. Loading through a
// recording app.Env tells which variables the service reads; loading from the compose
// environment tells whether the service accepts the values.
var appServices = map[string]func(*app.Env) app.Config{
	"order": func(env *app.Env) app.Config {
		return ordersvc.LoadConfig(env).App
	},
	"payment": func(env *app.Env) app.Config {
		return paymentsvc.LoadConfig(env).App
	},
	"inventory": func(env *app.Env) app.Config {
		return inventorysvc.LoadConfig(env).App
	},
}

// otelVars are the OTEL_* variables tracing.Setup (or the SDK it configures) reads.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_TRACES_SAMPLER", "OTEL_RESOURCE_ATTRIBUTES",
}

// requiredVars must be set on every service: their defaults point at 127.0.0.1 or at no
// exporter, which is wrong inside a container.
var requiredVars = []string{
	"DATABASE_URL", "REDIS_URL", "KAFKA_BROKERS", "HTTP_ADDR",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME",
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Hostname    string            `yaml:"hostname"`
	Build       *composeBuild     `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Entrypoint []string `yaml:"entrypoint"`
	Command    []string `yaml:"command"`
	Restart    string   `yaml:"restart"`
}

// readEnvFile reads KEY=value lines of a Compose env file (# comments, blank lines).
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=value", path, line)
		}
		out[k] = v
	}
	return out
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

// interpolation matches ${VAR}, ${VAR:-default} and ${VAR-default}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?]([^}]*))?\}`)

// loadCompose reads docker-compose.yml the way Compose does with deploy/compose.env as
// its env file and an otherwise empty environment: variables take the file's values or
// their defaults, YAML anchors and merge keys are resolved.
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	envFile := readEnvFile(t, filepath.Join(root, "deploy", "compose.env"))
	raw = interpolation.ReplaceAllFunc(raw, func(m []byte) []byte {
		sm := interpolation.FindSubmatch(m)
		if v, ok := envFile[string(sm[1])]; ok {
			return []byte(v)
		}
		if bytes.Contains(m, []byte(":?")) {
			t.Fatalf("docker-compose.yml requires %s, which deploy/compose.env does not set", sm[1])
		}
		return sm[2]
	})
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return f
}

func (f composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := f.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	return s
}

// published maps container ports to host ports from "host:container" entries.
func (s composeService) published(t *testing.T) map[string]string {
	t.Helper()
	out := make(map[string]string)
	for _, p := range s.Ports {
		parts := strings.Split(strings.SplitN(p, "/", 2)[0], ":")
		if len(parts) < 2 {
			t.Fatalf("port %q: want host:container", p)
		}
		out[parts[len(parts)-1]] = parts[len(parts)-2]
	}
	return out
}

func hostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return h, p
}

func TestComposeHasEveryService(t *testing.T) {
	f := loadCompose(t)
	for _, name := range []string{"kafka", "kafka-init", "postgres", "redis", "jaeger", "order", "payment", "inventory"} {
		f.service(t, name)
	}
	for name, s := range f.Services {
		for dep, d := range s.DependsOn {
			target, ok := f.Services[dep]
			if !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
				continue
			}
			switch d.Condition {
			case "service_healthy":
				if target.Healthcheck == nil || len(target.Healthcheck.Test) == 0 {
					t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
				}
			case "service_started", "service_completed_successfully":
			default:
				t.Errorf("%s depends on %s with condition %q", name, dep, d.Condition)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") {
				fi, err := os.Stat(filepath.Join(root, src))
				if err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				} else if strings.HasSuffix(src, ".sh") && fi.Mode()&0o111 == 0 {
					t.Errorf("%s mounts %s, which is not executable", name, src)
				}
			} else if _, ok := f.Volumes[src]; !ok && !strings.HasPrefix(src, "/") {
				t.Errorf("%s uses volume %s, not declared under volumes:", name, src)
			}
		}
	}
	if init := f.service(t, "kafka-init"); init.DependsOn["kafka"].Condition != "service_healthy" {
		t.Errorf("kafka-init must wait for a healthy kafka, has %+v", init.DependsOn)
	}
}

func TestComposeAppServices(t *testing.T) {
	f := loadCompose(t)
	kafkaSvc := f.service(t, "kafka")
	pgSvc := f.service(t, "postgres")
	jaeger := f.service(t, "jaeger")
	jaegerPorts := jaeger.published(t)
	internalKafka := advertised(t, kafkaSvc)[kafkaSvc.Environment["KAFKA_INTER_BROKER_LISTENER_NAME"]]
	if internalKafka == "" {
		t.Fatalf("kafka advertises no inter-broker listener: %v", kafkaSvc.Environment)
	}
	dbServices := strings.Fields(pgSvc.Environment["CHOREO_SERVICES"])

	for name, load := range appServices {
		t.Run(name, func(t *testing.T) {
			s := f.service(t, name)
			if s.Build == nil || s.Build.Args["SERVICE"] != name || filepath.Base(s.Build.Dockerfile) != "Dockerfile" {
				t.Errorf("build = %+v, want the Dockerfile with SERVICE=%s", s.Build, name)
			}
			for dep, cond := range map[string]string{"kafka-init": "service_completed_successfully",
				"postgres": "service_healthy", "redis": "service_healthy"} {
				if got := s.DependsOn[dep].Condition; got != cond {
					t.Errorf("depends_on %s: condition %q, want %q", dep, got, cond)
				}
			}

			// Every variable set is one the service reads: no typos, no leftovers.
			read := make(map[string]bool)
			load(app.NewEnv(func(k string) (string, bool) { read[k] = true; return "", false }))
			for k := range s.Environment {
				if !read[k] && !slices.Contains(otelVars, k) {
					t.Errorf("environment sets %s, which %s does not read", k, name)
				}
			}
			for _, k := range requiredVars {
				if s.Environment[k] == "" {
					t.Errorf("environment lacks %s", k)
				}
			}

			// The service accepts the values.
			env := app.MapEnv(s.Environment)
			cfg := load(env)
			if err := env.Err(); err != nil {
				t.Fatalf("%s rejects its compose environment: %v", name, err)
			}

			// Event signing: the service signs with its own key, which the others trust
			// for its source, and requires every source's signature.
			if cfg.Signing.Signer == nil || len(cfg.Signing.TrustedKeys) != len(appServices) {
				t.Errorf("signing: signer %v, trusted sources %d; want a signer and all %d sources", cfg.Signing.Signer, len(cfg.Signing.TrustedKeys), len(appServices))
			} else if ids := cfg.Signing.TrustedKeys[name].IDs(); len(ids) != 1 || ids[0] != cfg.Signing.Signer.KeyID() {
				t.Errorf("signing: %s signs with key %s, but %s is trusted for its source", name, cfg.Signing.Signer.KeyID(), ids)
			}

			db, err := pgx.ParseConfig(cfg.DatabaseURL)
			if err != nil {
				t.Fatal(err)
			}
			if db.Host != "postgres" || db.Port != 5432 || db.Database != "choreo_"+name || db.User != name {
				t.Errorf("DATABASE_URL points at %s@%s:%d/%s, want %s@postgres:5432/choreo_%s", db.User, db.Host, db.Port, db.Database, name, name)
			}
			if db.Password != pgSvc.Environment["CHOREO_DB_PASSWORD"] {
				t.Errorf("DATABASE_URL password does not match postgres' CHOREO_DB_PASSWORD")
			}
			if !slices.Contains(dbServices, name) {
				t.Errorf("postgres CHOREO_SERVICES %q does not create %s's database", dbServices, name)
			}
			if ru, err := url.Parse(cfg.RedisURL); err != nil || ru.Host != "redis:6379" {
				t.Errorf("REDIS_URL does not point at redis:6379 (%v)", err)
			} else if pw, _ := ru.User.Password(); pw == "" || !slices.Contains(f.service(t, "redis").Command, pw) {
				t.Errorf("REDIS_URL password does not match redis' --requirepass")
			}
			if len(cfg.KafkaBrokers) == 0 || cfg.KafkaBrokers[0] != internalKafka {
				t.Errorf("KAFKA_BROKERS %v, want kafka's inter-broker listener %s", cfg.KafkaBrokers, internalKafka)
			}

			// HTTP: published, probed by the healthcheck on the same port.
			_, port := hostPort(t, cfg.HTTPAddr)
			if s.published(t)[port] == "" {
				t.Errorf("HTTP port %s is not published (ports %v)", port, s.Ports)
			}
			if s.Healthcheck == nil || !slices.Contains(s.Healthcheck.Test, "/healthcheck") ||
				!slices.Contains(s.Healthcheck.Test, "http://127.0.0.1:"+port+"/readyz") {
				t.Errorf("healthcheck %+v, want /healthcheck http://127.0.0.1:%s/readyz", s.Healthcheck, port)
			}

			// Tracing: OTLP to the jaeger service, links to the UI the host can open.
			otlp, err := url.Parse(s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
			if err != nil || otlp.Hostname() != "jaeger" || otlp.Port() != "4318" {
				t.Errorf("%s = %q, want http://jaeger:4318", "OTEL_EXPORTER_OTLP_ENDPOINT", s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
			}
			if s.Environment["OTEL_SERVICE_NAME"] != name {
				t.Errorf("%s = %q, want %s", "OTEL_SERVICE_NAME", s.Environment["OTEL_SERVICE_NAME"], name)
			}
			if name == "order" { // the service that builds trace links
				jaegerUI := ordersvc.LoadConfig(app.MapEnv(s.Environment)).Settings.JaegerUIURL
				ui, err := url.Parse(jaegerUI)
				if s.Environment[ordersvc.EnvJaegerUIURL] == "" || err != nil || ui.Hostname() != "localhost" || jaegerPorts[ui.Port()] != ui.Port() {
					t.Errorf("JAEGER_UI_URL %s is not jaeger's published UI port (jaeger ports %v)", jaegerUI, jaeger.Ports)
				}
			}
			if s.DependsOn["jaeger"].Condition == "" {
				t.Errorf("%s does not depend on jaeger", name)
			}

			// tracing.Setup accepts the OTEL_* settings.
			for _, k := range otelVars {
				t.Setenv(k, s.Environment[k])
			}
			tel, err := tracing.Setup(context.Background(), name, tracing.WithoutGlobals())
			if err != nil {
				t.Fatalf("tracing.Setup with the compose environment: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = tel.Shutdown(ctx) // nothing was recorded; the exporter has nothing to send
		})
	}

	if hang := f.service(t, "payment").Environment[paymentsvc.EnvHangCustomers]; hang != "c-hang" {
		t.Errorf("payment %s = %q: the demo's stuck order needs c-hang", paymentsvc.EnvHangCustomers, hang)
	}
}

// advertised maps kafka's listener names to their advertised host:port.
func advertised(t *testing.T, s composeService) map[string]string {
	t.Helper()
	out := make(map[string]string)
	for l := range strings.SplitSeq(s.Environment["KAFKA_ADVERTISED_LISTENERS"], ",") {
		name, addr, ok := strings.Cut(l, "://")
		if !ok {
			t.Fatalf("KAFKA_ADVERTISED_LISTENERS entry %q", l)
		}
		out[name] = addr
	}
	return out
}

func TestComposeKafka(t *testing.T) {
	f := loadCompose(t)
	k := f.service(t, "kafka")
	if !strings.HasPrefix(k.Image, "apache/kafka:") {
		t.Errorf("kafka image %s, want the official apache/kafka", k.Image)
	}
	env := k.Environment
	if env["KAFKA_PROCESS_ROLES"] != "broker,controller" {
		t.Errorf("KAFKA_PROCESS_ROLES %q: want KRaft combined mode", env["KAFKA_PROCESS_ROLES"])
	}
	protocols := make(map[string]bool)
	for m := range strings.SplitSeq(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",") {
		name, _, _ := strings.Cut(m, ":")
		protocols[name] = true
	}
	listeners := make(map[string]string)
	for l := range strings.SplitSeq(env["KAFKA_LISTENERS"], ",") {
		name, addr, _ := strings.Cut(l, "://")
		listeners[name] = addr
		if !protocols[name] {
			t.Errorf("listener %s has no security protocol mapping", name)
		}
	}
	if _, ok := listeners[env["KAFKA_CONTROLLER_LISTENER_NAMES"]]; !ok {
		t.Errorf("controller listener %q is not in KAFKA_LISTENERS", env["KAFKA_CONTROLLER_LISTENER_NAMES"])
	}
	ports := k.published(t)
	hostReachable := false
	for name, addr := range advertised(t, k) {
		l, ok := listeners[name]
		if !ok {
			t.Errorf("advertised listener %s is not a listener", name)
			continue
		}
		h, p := hostPort(t, addr)
		_, lp := hostPort(t, l)
		if lp != p {
			t.Errorf("listener %s listens on %s but advertises port %s", name, lp, p)
		}
		switch h {
		case "kafka", k.Hostname:
		case "localhost", "127.0.0.1":
			// The host's clients (sagactl, kcat) use the default 127.0.0.1:9092.
			if ports[p] == p && p == "9092" {
				hostReachable = true
			}
		default:
			t.Errorf("listener %s advertises %s: not resolvable by containers or the host", name, h)
		}
	}
	if !hostReachable {
		t.Errorf("no listener advertised as localhost:9092 and published on 9092 (ports %v)", k.Ports)
	}
	if env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] != "false" {
		t.Error("auto topic creation should be off: kafka-init creates the topics")
	}

	// kafka-init creates the saga's topics, and the script's default agrees.
	init := f.service(t, "kafka-init")
	if got := strings.Fields(init.Environment["CHOREO_TOPICS"]); !slices.Equal(got, events.Topics) {
		t.Errorf("kafka-init CHOREO_TOPICS %v, want events.Topics %v", got, events.Topics)
	}
	if init.Environment["KAFKA_BOOTSTRAP"] != advertised(t, k)[env["KAFKA_INTER_BROKER_LISTENER_NAME"]] {
		t.Errorf("kafka-init KAFKA_BOOTSTRAP %q is not kafka's internal listener", init.Environment["KAFKA_BOOTSTRAP"])
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy/kafka/create-topics.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`CHOREO_TOPICS:-([^}]*)\}`).FindSubmatch(script)
	if m == nil || !slices.Equal(strings.Fields(string(m[1])), events.Topics) {
		t.Errorf("create-topics.sh default topics %q, want %v", m, events.Topics)
	}
	if !bytes.Contains(script, []byte(`"$t.dlq"`)) {
		t.Error("create-topics.sh does not create the .dlq topics consumer.DeadLetter writes to")
	}
	if init.Restart != "no" {
		t.Errorf("kafka-init restart %q: a one-shot job must not restart", init.Restart)
	}
}

// The compose stack's broker is the one the tests run (scripts/kafka.sh): the same Kafka
// version, and the same KRaft and listener settings as the script's one-node cluster.
func TestComposeKafkaMatchesTests(t *testing.T) {
	script := filepath.Join(root, "scripts", "kafka.sh")
	run := func(args ...string) string {
		out, err := exec.Command("bash", append([]string{script}, args...)...).Output()
		if err != nil {
			t.Fatalf("scripts/kafka.sh %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	version := run("version")
	f := loadCompose(t)
	for _, name := range []string{"kafka", "kafka-init"} {
		if img := f.service(t, name).Image; img != "apache/kafka:"+version {
			t.Errorf("%s image %s, want apache/kafka:%s as scripts/kafka.sh runs", name, img, version)
		}
	}
	env := f.service(t, "kafka").Environment
	props := map[string]string{}
	shared := false
	for line := range strings.SplitSeq(run("config", "-n", "1"), "\n") {
		if line == "# Shared" {
			shared = true
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("scripts/kafka.sh config: line %q", line)
		}
		props[k] = v
		if !shared || k == "listener.security.protocol.map" {
			continue
		}
		envName := "KAFKA_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))
		if env[envName] != v {
			t.Errorf("%s %q in docker-compose.yml, want %q (%s=%s in scripts/kafka.sh)", envName, env[envName], v, k, v)
		}
	}
	if !shared {
		t.Fatal("scripts/kafka.sh config prints no # Shared section")
	}
	// The stack may add listeners (HOST, for the host's clients); those the script has are
	// named and mapped alike.
	composeMap := strings.Split(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",")
	for m := range strings.SplitSeq(props["listener.security.protocol.map"], ",") {
		if !slices.Contains(composeMap, m) {
			t.Errorf("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP %v lacks %s", composeMap, m)
		}
	}
	listenerNames := func(list string) []string {
		var names []string
		for l := range strings.SplitSeq(list, ",") {
			name, _, _ := strings.Cut(l, "://")
			names = append(names, name)
		}
		return names
	}
	composeListeners := listenerNames(env["KAFKA_LISTENERS"])
	for _, name := range listenerNames(props["listeners"]) {
		if !slices.Contains(composeListeners, name) {
			t.Errorf("KAFKA_LISTENERS %v lacks the listener %s", composeListeners, name)
		}
	}
	if _, ok := advertised(t, f.service(t, "kafka"))[env["KAFKA_INTER_BROKER_LISTENER_NAME"]]; !ok {
		t.Errorf("the inter-broker listener %s is not advertised", env["KAFKA_INTER_BROKER_LISTENER_NAME"])
	}
	// One voter: this node, on its controller listener's port.
	voter := regexp.MustCompile(`^(\d+)@[^:]+:(\d+)$`).FindStringSubmatch(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
	var controllerPort string
	for l := range strings.SplitSeq(env["KAFKA_LISTENERS"], ",") {
		if name, addr, _ := strings.Cut(l, "://"); name == env["KAFKA_CONTROLLER_LISTENER_NAMES"] {
			_, controllerPort = hostPort(t, addr)
		}
	}
	if voter == nil || voter[1] != env["KAFKA_NODE_ID"] || voter[2] != controllerPort {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q: want this node (%s) on its controller port %s",
			env["KAFKA_CONTROLLER_QUORUM_VOTERS"], env["KAFKA_NODE_ID"], controllerPort)
	}
	if env["CLUSTER_ID"] == "" {
		t.Error("no CLUSTER_ID: the image formats the KRaft storage with it")
	}
}

func TestComposeJaeger(t *testing.T) {
	f := loadCompose(t)
	j := f.service(t, "jaeger")
	if !strings.HasPrefix(j.Image, "jaegertracing/all-in-one:") {
		t.Errorf("jaeger image %s", j.Image)
	}
	ports := j.published(t)
	for _, p := range []string{"16686", "4317", "4318"} {
		if ports[p] != p {
			t.Errorf("jaeger port %s not published as itself (ports %v)", p, j.Ports)
		}
	}
	if j.Environment["COLLECTOR_OTLP_ENABLED"] != "true" {
		t.Error("jaeger: COLLECTOR_OTLP_ENABLED must be true")
	}
}

func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var user string
	for line := range strings.SplitSeq(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "FROM":
			froms = append(froms, fields[1])
		case "USER":
			user = fields[1]
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got FROM %v", froms)
	}
	final := froms[len(froms)-1]
	if !strings.Contains(final, "distroless/static") {
		t.Errorf("final stage %s: want a distroless static image", final)
	}
	if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("USER %q: the service must not run as root", user)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./services/${SERVICE}", "./deploy/healthcheck", "ARG SERVICE",
		"COPY --from=build /out/healthcheck /healthcheck", `ENTRYPOINT ["/service"]`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestServiceBinariesAreStatic checks what the Dockerfile builds under its settings
// (CGO_ENABLED=0, GOOS=linux): every package resolves, and none of the packages linked
// into a binary uses cgo, so the Go linker produces a static binary that runs on
// distroless/static. (go list instead of go build: same build constraints, no compile.)
func TestServiceBinariesAreStatic(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go toolchain not on PATH: %v", err)
	}
	pkgs := []string{"./deploy/healthcheck"}
	for name := range appServices {
		pkgs = append(pkgs, "./services/"+name)
	}
	slices.Sort(pkgs)
	args := append([]string{"list", "-e", "-deps", "-f", "{{.ImportPath}}|{{.Name}}|{{len .CgoFiles}}|{{if .Error}}{{.Error}}{{end}}"}, pkgs...)
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	mains := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 4)
		if len(f) != 4 {
			t.Fatalf("go list line %q", line)
		}
		if f[3] != "" {
			t.Errorf("%s does not build with CGO_ENABLED=0: %s", f[0], f[3])
		}
		if f[2] != "0" {
			t.Errorf("%s uses cgo", f[0])
		}
		if f[1] == "main" {
			mains++
		}
	}
	if mains != len(pkgs) {
		t.Errorf("%d main packages among %v, want %d", mains, pkgs, len(pkgs))
	}
}

// TestInitDatabasesScript runs deploy/postgres/init-databases.sh against the test
// Postgres, twice (it must be idempotent), and checks that each service role owns its
// database, can create tables in it, and cannot connect to another service's database.
func TestInitDatabasesScript(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("psql is needed to run init-databases.sh: %v", err)
	}
	dsn := testenv.PostgresDSN(t)
	admin, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	suffix := strings.TrimPrefix(testenv.Name(t, ""), "_")
	services := []string{"a_" + suffix, "b_" + suffix}
	// The cleanup opens its own connection: conn is closed when the test function
	// returns, before cleanups run.
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(ctx, admin)
		if err != nil {
			t.Errorf("drop the script's databases: %v", err)
			return
		}
		defer c.Close(ctx)
		for _, s := range services {
			for _, sql := range []string{
				"DROP DATABASE IF EXISTS " + pgx.Identifier{"choreo_" + s}.Sanitize() + " WITH (FORCE)",
				"DROP ROLE IF EXISTS " + pgx.Identifier{s}.Sanitize(),
			} {
				if _, err := c.Exec(ctx, sql); err != nil {
					t.Errorf("%s: %v", sql, err)
				}
			}
		}
	})
	run := func() {
		cmd := exec.Command("sh", filepath.Join(root, "deploy/postgres/init-databases.sh"))
		cmd.Env = append(os.Environ(),
			"PGHOST="+admin.Host, "PGPORT="+strconv.Itoa(int(admin.Port)), "PGPASSWORD="+admin.Password,
			"POSTGRES_USER="+admin.User, "CHOREO_SERVICES="+strings.Join(services, " "), "CHOREO_DB_PASSWORD=s3cret")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("init-databases.sh: %v\n%s", err, b)
		}
	}
	run()
	run() // idempotent: roles and databases exist now

	for _, s := range services {
		var owner string
		err := conn.QueryRow(ctx, `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1`, "choreo_"+s).Scan(&owner)
		if err != nil || owner != s {
			t.Fatalf("database choreo_%s: owner %q, err %v; want owned by %s", s, owner, err, s)
		}
		cfg := admin.Copy()
		cfg.User, cfg.Password, cfg.Database = s, "s3cret", "choreo_"+s
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("role %s cannot connect to its database: %v", s, err)
		}
		if _, err := c.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)"); err != nil {
			t.Errorf("role %s cannot create tables in its database: %v", s, err)
		}
		c.Close(ctx)
	}
	other := admin.Copy()
	other.User, other.Password, other.Database = services[0], "s3cret", "choreo_"+services[1]
	if c, err := pgx.ConnectConfig(ctx, other); err == nil {
		c.Close(ctx)
		t.Errorf("role %s can connect to %s", services[0], other.Database)
	} else if !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("cross-service connect failed for another reason: %v", err)
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(filepath.Join(root, "docker-compose.yml")); err != nil {
		fmt.Fprintln(os.Stderr, "deploy tests run from the deploy directory:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
