package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

//go:embed consoleui
var consoleUI embed.FS

// consoleCSP allows the console's own script and stylesheet only: no inline script, no
// inline style, no framing, forms post only to the console.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// csrfCookie holds a random value; a form's token is its HMAC under the process's
// secret (a signed double-submit cookie), so a page of another site can neither read
// nor forge the token.
const (
	csrfCookie = "sagactl_csrf"
	csrfField  = "csrf"
)

var consoleTemplates = map[string]*template.Template{}

func init() {
	funcs := template.FuncMap{
		"dur":     fmtDuration,
		"version": versionString,
		"key":     violationKey,
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"safeURL":  safeURL,
		"orDash":   orDash,
		"terminal": terminal,
		"lower":    strings.ToLower,
		"amount":   fmtAmount,
		"mod2":     func(i int) int { return i % 2 },
	}
	pages, err := fs.Glob(consoleUI, "consoleui/*.page.html")
	if err != nil {
		panic(err)
	}
	for _, p := range pages {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "consoleui/"), ".page.html")
		consoleTemplates[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(consoleUI, "consoleui/layout.html", p))
	}
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	CSRF    string
	Notice  string
	Error   string
	Refresh int  // overview polling period, ms
	Tracker bool // the console reads a saga tracker (-tracker-db)

	Overview  *overview
	Order     *orderPage
	DLQ       *dlqPage
	Record    *dlqRecordPage
	Replay    *replayPage
	Sagas     *sagasPage
	Saga      *sagaPage
	Flow      *flowPage
	Contracts *contractsPage
}

func (s *console) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(consoleUI, "consoleui/static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.handleOverview)
	mux.HandleFunc("GET /api/overview", s.handleOverviewJSON)
	mux.HandleFunc("GET /orders/{$}", func(w http.ResponseWriter, r *http.Request) { // the order box without script
		id := strings.TrimSpace(r.URL.Query().Get("id"))
		if id == "" {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, "/orders/"+pathEscape(id), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /orders/{id}", s.handleOrder)
	mux.HandleFunc("POST /orders/{id}/cancel", s.handleCancel)
	mux.HandleFunc("GET /dlq", s.handleDLQ)
	mux.HandleFunc("GET /dlq/record", s.handleDLQRecord)
	mux.HandleFunc("POST /dlq/replay", s.handleReplay)
	if s.tr != nil {
		mux.HandleFunc("GET /sagas/{$}", s.handleSagas)
		mux.HandleFunc("GET /sagas/{id}", s.handleSaga)
		mux.HandleFunc("GET /flow/{$}", s.handleFlow)
		mux.HandleFunc("GET /flow/{file}", s.handleFlowFile)
		mux.HandleFunc("GET /contracts/{$}", s.handleContracts)
	}
	return s.secure(mux)
}

// secure adds the security headers to every answer, refuses requests for another host
// name (DNS rebinding of a loopback console) and checks the CSRF token of every POST.
func (s *console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !s.knownHost(r.Host) {
			http.Error(w, "this console answers only to loopback host names, IP addresses and the names of -hosts", http.StatusMisdirectedRequest)
			return
		}
		if !s.authorized(r) {
			h.Set("WWW-Authenticate", `Basic realm="sagactl console", charset="UTF-8"`)
			http.Error(w, "an access token is required (the password of HTTP Basic authentication)", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			if err := s.checkCSRF(r); err != nil {
				http.Error(w, "forbidden: "+err.Error()+" (reload the page and try again)", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// knownHost reports whether the console answers to the Host header host: a loopback
// name, an IP address (DNS rebinding needs a name) or a name given with -hosts.
// Checked on every listen address, so a page of another site cannot reach the console
// under a name of its own.
func (s *console) knownHost(host string) bool {
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	return isLoopback(host) || net.ParseIP(host) != nil || s.hosts[host]
}

// authorized reports whether r carries the access token, if one is set: as the
// password of HTTP Basic authentication (a browser asks for it) or a bearer token.
func (s *console) authorized(r *http.Request) bool {
	if s.token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		_, got, ok = r.BasicAuth()
	}
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1
}

// csrfToken returns the token for the forms of this answer, setting the cookie first if
// the browser has none.
func (s *console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	val := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		val = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		val = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: val, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	return s.sign(val)
}

func (s *console) sign(val string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("sagactl-console-csrf\x00" + val))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

var errCSRF = errors.New("missing or invalid CSRF token")

func (s *console) checkCSRF(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("%w: cross-site request (%s)", errCSRF, site)
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return fmt.Errorf("%w: no %s cookie", errCSRF, csrfCookie)
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("%w: %w", errCSRF, err)
	}
	got := r.PostForm.Get(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(s.sign(c.Value))) {
		return errCSRF
	}
	return nil
}

func (s *console) render(w http.ResponseWriter, r *http.Request, name string, status int, p page) {
	if p.CSRF == "" {
		p.CSRF = s.csrfToken(w, r)
	}
	if p.Notice == "" {
		p.Notice = consoleNotices[r.URL.Query().Get("notice")]
	}
	p.Tracker = s.tr != nil
	var buf bytes.Buffer
	if err := consoleTemplates[name].Execute(&buf, p); err != nil {
		log.Printf("sagactl console: render %s: %v", name, safeText(err.Error()))
		http.Error(w, "render: "+safeText(err.Error()), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(visibleMarkup(buf.Bytes()))
}

// consoleNotices are the notices a page shows for its ?notice= code, set by the
// console's own redirects. Any other value shows nothing: a link with a text of its own
// in ?notice= cannot make the console say it.
var consoleNotices = map[string]string{
	"cancel-requested": "cancellation requested",
	"cancel-refused":   "cancel refused: the order's state does not allow it (only PENDING orders can be cancelled)",
	"cancel-not-found": "cancel failed: the order service does not know this order",
	"cancel-failed":    "cancel failed: the order service did not accept it (the console's log has the error)",
}

// requestCtx bounds a page's work by the console's timeout (several requests each).
func (s *console) requestCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 3*s.conn.timeout)
}

func (s *console) handleOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	ov := s.overview(ctx)
	s.render(w, r, "overview", http.StatusOK, page{Title: "Overview", Nav: "overview", Overview: &ov,
		Refresh: int(consoleRefresh / time.Millisecond)})
}

func (s *console) handleOverviewJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	ov := s.overview(ctx)
	b, err := visibleJSON(ov)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// orderPage is the order page's data.
type orderPage struct {
	Order     Order
	Timeline  timeline
	Rows      []historyRow
	Terminal  bool
	JaegerURL string
	SearchURL string
	Age       string
	InState   string
	Waiting   string     // Order.waitingOn, as sagactl order prints it
	Trace     *waterfall // the order's trace read from Jaeger; nil without -jaeger-query
}

type historyRow struct {
	Transition
	Lane  string
	Delta string
}

func (s *console) handleOrder(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	o, err := s.api.Get(ctx, id)
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errNotFound) {
			status = http.StatusNotFound
		}
		s.render(w, r, "order", status, page{Title: "Order " + id, Nav: "order", Error: err.Error()})
		return
	}
	now := s.now()
	op := &orderPage{Order: o, Timeline: buildTimeline(o.History), Terminal: terminal(o.State),
		JaegerURL: safeURL(o.JaegerURL), Age: fmtDuration(o.Age(now)), Waiting: o.waitingOn()}
	if !o.StateSince.IsZero() {
		op.InState = fmtDuration(now.Sub(o.StateSince))
	}
	if op.JaegerURL != "" {
		if i := strings.Index(op.JaegerURL, "/trace/"); i > 0 {
			op.SearchURL = op.JaegerURL[:i] + "/search?service=order&tags=" +
				`%7B%22saga.correlation_id%22%3A%22` + templateQueryEscape(o.ID) + `%22%7D`
		}
	}
	op.Trace = s.traceWaterfall(ctx, o.TraceID)
	var prev time.Time
	for _, h := range o.History {
		row := historyRow{Transition: h, Lane: laneOf(h.CauseEventType)}
		if !prev.IsZero() {
			row.Delta = "+" + fmtDuration(h.At.Sub(prev))
		}
		prev = h.At
		op.Rows = append(op.Rows, row)
	}
	s.render(w, r, "order", http.StatusOK, page{Title: "Order " + o.ID, Nav: "order", Order: op})
}

func templateQueryEscape(s string) string { return template.URLQueryEscaper(s) }

func (s *console) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	_, err := s.api.Cancel(ctx, id)
	notice := "cancel-requested"
	var ae *apiError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Status == http.StatusConflict:
		notice = "cancel-refused"
	case errors.Is(err, errNotFound):
		notice = "cancel-not-found"
	default:
		notice = "cancel-failed"
		log.Printf("sagactl console: cancel %s: %s", safeText(id), safeText(err.Error()))
	}
	http.Redirect(w, r, "/orders/"+pathEscape(id)+"?notice="+notice, http.StatusSeeOther)
}

func pathEscape(s string) string { return strings.ReplaceAll(template.URLQueryEscaper(s), "+", "%20") }

// dlqPage is the dead-letter list with its filters.
type dlqPage struct {
	Topics  []string
	Reasons []string
	Groups  []string
	Topic   string
	Reason  string
	Group   string
	Records []dlqRecord
	Total   int // before the display bound
	Shown   int
}

// consoleDLQShow bounds the records the list shows (the newest); filters narrow it.
const consoleDLQShow = 500

func (s *console) handleDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dp := &dlqPage{Topic: q.Get("topic"), Reason: q.Get("reason"), Group: q.Get("group")}
	p := page{Title: "Dead letters", Nav: "dlq", DLQ: dp}
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	recs, topics, err := s.deadLetters(ctx, dp.Topic)
	dp.Topics = topics
	if err != nil {
		p.Error = err.Error()
		s.render(w, r, "dlq", http.StatusBadGateway, p)
		return
	}
	f := dlqFilter{reason: undash(dp.Reason), group: undash(dp.Group)}
	for _, rec := range recs {
		if !slices.Contains(dp.Reasons, orDash(rec.Reason)) {
			dp.Reasons = append(dp.Reasons, orDash(rec.Reason))
		}
		if !slices.Contains(dp.Groups, orDash(rec.Group)) {
			dp.Groups = append(dp.Groups, orDash(rec.Group))
		}
		if f.match(rec) {
			dp.Records = append(dp.Records, rec)
		}
	}
	slices.Sort(dp.Reasons)
	slices.Sort(dp.Groups)
	dp.Total = len(dp.Records)
	if len(dp.Records) > consoleDLQShow {
		dp.Records = dp.Records[len(dp.Records)-consoleDLQShow:]
	}
	dp.Shown = len(dp.Records)
	s.render(w, r, "dlq", http.StatusOK, p)
}

// deadLetters reads the records of one dead-letter topic, or of all of them.
func (s *console) deadLetters(ctx context.Context, topic string) ([]dlqRecord, []string, error) {
	k, err := s.kafka(ctx)
	if err != nil {
		return nil, nil, err
	}
	topics, err := k.dlqTopics(ctx)
	if err != nil {
		return nil, nil, err
	}
	read := topics
	if topic != "" {
		read = []string{dlqTopic(topic)}
	}
	var all []dlqRecord
	for _, t := range read {
		recs, err := k.readDLQ(ctx, t)
		if err != nil {
			return nil, topics, err
		}
		all = append(all, recs...)
	}
	slices.SortStableFunc(all, func(a, b dlqRecord) int { return a.FailedAt.Compare(b.FailedAt) })
	return all, topics, nil
}

// dlqRecordPage is one dead-lettered record.
type dlqRecordPage struct {
	Rec     dlqRecord
	Payload string
}

func (s *console) handleDLQRecord(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topic, posStr := q.Get("topic"), q.Get("pos")
	p := page{Title: "Dead letter " + topic + " " + posStr, Nav: "dlq"}
	pp, o, err := parsePos(posStr)
	if err != nil || topic == "" {
		p.Error = "give ?topic=NAME.dlq&pos=PARTITION:OFFSET"
		s.render(w, r, "record", http.StatusBadRequest, p)
		return
	}
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	k, err := s.kafka(ctx)
	if err == nil {
		var rec dlqRecord
		if rec, err = k.readCopies(ctx, dlqTopic(topic), pp, o); err == nil {
			rp := &dlqRecordPage{Rec: rec, Payload: rec.Text}
			if rec.Value != nil {
				var b bytes.Buffer
				if json.Indent(&b, rec.Value, "", "  ") == nil {
					rp.Payload = b.String()
				} else {
					rp.Payload = string(rec.Value)
				}
			}
			p.Record = rp
			s.render(w, r, "record", http.StatusOK, p)
			return
		}
	}
	p.Error = err.Error()
	status := http.StatusBadGateway
	if errors.Is(err, errNotFound) {
		status = http.StatusNotFound
	}
	s.render(w, r, "record", status, p)
}

// replayPage shows a dry run (the confirmation step) or a replay's result.
type replayPage struct {
	DryRun  bool
	Items   []replayItem
	Skipped []string
	Refused []string // with all=1: records that failed a check, left out ("topic partition:offset: why")
	Errors  []string
}

type replayItem struct {
	DLQTopic string
	replayed
}

// Ref is the form value naming the record: "topic|partition:offset".
func (i replayItem) Ref() string { return i.DLQTopic + "|" + i.From }

// handleReplay replays dead letters through kafka.replay, the code of `sagactl dlq
// replay`. mode=preview (the default) is a dry run that lists what would be produced and
// asks for confirmation; the confirmation posts mode=replay with exactly those records
// (rec=topic|partition:offset), so records dead-lettered in between are not included.
// A selection is either rec values or all=1 with topic, reason and group filters.
func (s *console) handleReplay(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	dry := f.Get("mode") != "replay"
	p := page{Title: "Replay dead letters", Nav: "dlq"}
	rp := &replayPage{DryRun: dry}
	p.Replay = rp
	ctx, cancel := s.requestCtx(r)
	defer cancel()
	k, err := s.kafka(ctx)
	if err != nil {
		p.Error = err.Error()
		s.render(w, r, "replay", http.StatusBadGateway, p)
		return
	}
	var sels []replaySelection
	if f.Get("all") != "" {
		if !dry {
			p.Error = "a replay names its records (confirm a dry run first)"
			s.render(w, r, "replay", http.StatusBadRequest, p)
			return
		}
		topics := []string{dlqTopic(f.Get("topic"))}
		if f.Get("topic") == "" {
			if topics, err = k.dlqTopics(ctx); err != nil {
				p.Error = err.Error()
				s.render(w, r, "replay", http.StatusBadGateway, p)
				return
			}
		}
		filter := dlqFilter{reason: undash(f.Get("reason")), group: undash(f.Get("group"))}
		for _, t := range topics {
			sels = append(sels, replaySelection{Topic: t, All: true, Filter: filter, DryRun: true})
		}
	} else {
		byTopic := map[string][]string{}
		var order []string
		for _, ref := range f["rec"] {
			t, pos, ok := strings.Cut(ref, "|")
			if !ok || t == "" {
				p.Error = fmt.Sprintf("bad record reference %q (want topic|partition:offset)", ref)
				s.render(w, r, "replay", http.StatusBadRequest, p)
				return
			}
			t = dlqTopic(t)
			if _, ok := byTopic[t]; !ok {
				order = append(order, t)
			}
			byTopic[t] = append(byTopic[t], pos)
		}
		if len(order) == 0 {
			p.Error = "nothing selected to replay"
			s.render(w, r, "replay", http.StatusBadRequest, p)
			return
		}
		for _, t := range order {
			sels = append(sels, replaySelection{Topic: t, Positions: byTopic[t], DryRun: dry})
		}
	}
	// Every selection is planned (read and checked) before anything is produced, so a
	// refusal in one topic replays nothing in another.
	status := http.StatusOK
	var plans []*replayPlan
	for _, sel := range sels {
		pl, err := k.plan(ctx, sel, func(rec dlqRecord, why string) {
			rp.Skipped = append(rp.Skipped, fmt.Sprintf("%s %s: %s", sel.Topic, rec.pos(), why))
		})
		if err != nil {
			rp.Errors = append(rp.Errors, err.Error())
			status = http.StatusBadGateway
			if errors.Is(err, errNotFound) || errors.Is(err, errUsage) || errors.Is(err, errRefused) {
				status = http.StatusBadRequest
			}
			continue
		}
		for _, x := range pl.refused {
			rp.Refused = append(rp.Refused, sel.Topic+" "+x.String())
		}
		plans = append(plans, pl)
	}
	if len(rp.Errors) > 0 {
		s.render(w, r, "replay", status, p)
		return
	}
	for _, pl := range plans {
		out := pl.items
		var err error
		if !dry {
			out, err = k.produce(ctx, pl)
		}
		for _, o := range out {
			rp.Items = append(rp.Items, replayItem{DLQTopic: pl.topic, replayed: o})
		}
		if err != nil {
			rp.Errors = append(rp.Errors, err.Error())
			status = http.StatusBadGateway
			break
		}
	}
	s.render(w, r, "replay", status, p)
}

// undash turns the "-" the list shows for an absent header back into "".
func undash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}
