package ordersvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/choreo-saga/choreo/app/admission"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/idempotency"
	"github.com/choreo-saga/choreo/services/events"
)

// MaxBodyBytes bounds the body of POST /orders (a 50-item order is about 3 KiB).
const MaxBodyBytes = 64 << 10

// HeaderIdempotencyKey is the request header that makes POST /orders idempotent.
const HeaderIdempotencyKey = "Idempotency-Key"

// Error codes of the HTTP API, in {"error":{"code":...,"message":...}}. They are stable:
// clients may branch on them.
const (
	CodeInvalidRequest    = "invalid_request"        // 400 (and 415): malformed or invalid input
	CodeCrossSite         = "cross_site"             // 403: a browser's cross-site request to change state
	CodeNotFound          = "not_found"              // 404
	CodeMethodNotAllowed  = "method_not_allowed"     // 405
	CodeInvalidTransition = "invalid_transition"     // 409: the order's state does not allow it
	CodePayloadTooLarge   = "payload_too_large"      // 413
	CodeKeyReused         = "idempotency_key_reused" // 422: same Idempotency-Key, other body
	CodeInternal          = "internal"               // 500: details are logged, never returned
	CodeOverloaded        = "overloaded"             // 503 with Retry-After: shed (admission.Limiter, WithMaxPending)
	CodeUnavailable       = "unavailable"            // 503 with Retry-After: Postgres or Redis down or out of connections
)

// UnavailableRetryAfter is the Retry-After of a request answered 503 unavailable: one
// that failed because a dependency is down or out of connections (consumer.IsOutage: a
// refused or broken connection, Postgres shutting down or at max_connections, ...). Its
// transaction did not commit, or its outcome is unknown; either way a retry with the same
// Idempotency-Key is safe.
const UnavailableRetryAfter = time.Second

// outageLogInterval is the least time between two "dependency unavailable" log lines.
const outageLogInterval = 10 * time.Second

// OrderJSON is an order in the HTTP API.
type OrderJSON struct {
	ID            string        `json:"id"`
	CustomerID    string        `json:"customer_id"`
	Items         []events.Item `json:"items"`
	Amount        int64         `json:"amount"`
	State         State         `json:"state"`
	Reason        string        `json:"reason,omitempty"`
	PaymentStatus string        `json:"payment_status"`
	StockStatus   string        `json:"stock_status"`
	CreatedAt     time.Time     `json:"created_at"`
	UpdatedAt     time.Time     `json:"updated_at"`
	StateSince    time.Time     `json:"state_since"`
	// CompensationAttempts counts the sends of order.cancel_requested (absent before any).
	CompensationAttempts int        `json:"compensation_attempts,omitempty"`
	DeadlineAt           *time.Time `json:"deadline_at,omitempty"`
	Stuck                bool       `json:"stuck"`
	TraceID              string     `json:"trace_id,omitempty"`
	JaegerURL            string     `json:"jaeger_url,omitempty"`
	// AgeSeconds is set in lists.
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
	// History is set by GET /orders/{id}.
	History []HistoryJSON `json:"history,omitempty"`
}

// HistoryJSON is one history entry in the HTTP API.
type HistoryJSON struct {
	From           State     `json:"from"`
	To             State     `json:"to"`
	CauseEventID   string    `json:"cause_event_id,omitempty"`
	CauseEventType string    `json:"cause_event_type"`
	Ignored        bool      `json:"ignored,omitempty"`
	Note           string    `json:"note,omitempty"`
	At             time.Time `json:"at"`
}

// ListJSON is the body of GET /orders.
type ListJSON struct {
	Orders []OrderJSON `json:"orders"`
}

// ErrorJSON is the body of every error response.
type ErrorJSON struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// JSON renders o for the API.
func (s *Service) JSON(o Order) OrderJSON {
	j := OrderJSON{
		ID: o.ID, CustomerID: o.CustomerID, Items: o.Items, Amount: o.Amount, State: o.State,
		Reason: o.Reason, PaymentStatus: o.Facts.PaymentStatus(), StockStatus: o.Facts.StockStatus(),
		CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(), StateSince: o.StateSince.UTC(),
		Stuck: o.Stuck, TraceID: o.TraceID, CompensationAttempts: o.CompensationAttempts,
	}
	if !o.DeadlineAt.IsZero() {
		d := o.DeadlineAt.UTC()
		j.DeadlineAt = &d
	}
	if o.TraceID != "" && s.cfg.JaegerUIURL != "" {
		j.JaegerURL = s.cfg.JaegerUIURL + "/trace/" + o.TraceID
	}
	return j
}

// Handler returns the order HTTP API (see Register) on its own net/http ServeMux, with an
// OpenTelemetry server span per request (otelhttp, named after the route pattern).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	s.Register(mux.Handle)
	return otelhttp.NewHandler(mux, "order",
		otelhttp.WithTracerProvider(s.tp),
		otelhttp.WithMeterProvider(s.mp),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" && r.Pattern != "/" {
				return r.Pattern
			}
			return r.Method
		}))
}

// Register registers the order HTTP API with handle (http.ServeMux.Handle, or
// app.App.Handle, which adds the server spans). Every handler turns a panic into a 500.
//
//	POST /orders               create (Idempotency-Key honoured)      201, or 200 on a replay
//	GET  /orders/{id}          the order with its full history         200
//	POST /orders/{id}/cancel   request cancellation                    202
//	POST /orders/{id}/retry-compensation  re-send the cancellation      202 (409 unless CANCELLING or COMPENSATION_FAILED)
//	GET  /orders               list: ?state=&stuck=true&older_than=&limit=  200
//	GET  /orders/counts        orders per state and stuck orders per state (CountsJSON)  200
//	/                          JSON 404 not_found or 405 method_not_allowed (with Allow)
//
// Errors are ErrorJSON bodies with the Code* codes. The POST routes refuse what a page
// of another site can make a browser send: cross-site fetch metadata (403 cross_site)
// and a body or Content-Type other than application/json (415); POST /orders requires
// application/json.
func (s *Service) Register(handle func(pattern string, h http.Handler)) {
	route := func(pattern string, h http.HandlerFunc) { handle(pattern, s.recoverer(h)) }
	route("POST /orders", sameSiteJSON(s.handleCreate))
	route("GET /orders", s.handleList)
	route("GET /orders/{id}", s.handleGet)
	route("GET /orders/counts", s.handleCounts)
	route("POST /orders/{id}/cancel", sameSiteJSON(s.handleCancel))
	route("POST /orders/{id}/retry-compensation", sameSiteJSON(s.handleRetryCompensation))

	// Every path the API knows, without methods: a request that matches one of them but
	// none of the routes above has the wrong method.
	known := http.NewServeMux()
	allow := map[string]string{"/orders": "GET, POST", "/orders/{id}": "GET", "/orders/counts": "GET", "/orders/{id}/cancel": "POST",
		"/orders/{id}/retry-compensation": "POST"}
	for p := range allow {
		known.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	route("/", func(w http.ResponseWriter, r *http.Request) {
		if _, p := known.Handler(r); p != "" {
			w.Header().Set("Allow", allow[p])
			writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" is not allowed here")
			return
		}
		writeError(w, http.StatusNotFound, CodeNotFound, "no such route")
	})
}

func (s *Service) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "order: http handler panicked", "panic", fmt.Sprint(v), "route", r.Pattern)
				writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e ErrorJSON
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

// fail maps a domain error to its response. Unexpected errors are logged with their
// details and answered with a generic 500.
func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, strings.TrimPrefix(err.Error(), ErrInvalidRequest.Error()+": "))
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, CodeNotFound, "order not found")
	case errors.Is(err, ErrOverloaded):
		admission.WriteOverloaded(w, PendingRetryAfter)
	case errors.Is(err, idempotency.ErrKeyReused):
		writeError(w, http.StatusUnprocessableEntity, CodeKeyReused,
			"this Idempotency-Key was already used with a different request body")
	case consumer.IsOutage(err):
		s.logOutage(r, err)
		w.Header().Set("Retry-After", strconv.Itoa(int(UnavailableRetryAfter/time.Second)))
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable,
			"a dependency of the service is unavailable; retry after the Retry-After delay with the same Idempotency-Key")
	default:
		s.log.ErrorContext(r.Context(), "order: request failed", "route", r.Pattern, "err", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

// logOutage logs a request answered 503 unavailable: at most one warning per
// outageLogInterval, with the error and how many such requests there were in all.
func (s *Service) logOutage(r *http.Request, err error) {
	total := s.unavailable.Add(1)
	if due(&s.lastOutageLog, outageLogInterval) {
		s.log.WarnContext(r.Context(), "order: dependency unavailable, answering 503",
			"route", r.Pattern, "err", err, "unavailable_total", total)
	}
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request) {
	// A body without Content-Type: application/json is refused, not guessed: a page on
	// another origin can send a cross-site POST without a preflight only with no or a
	// "simple" content type (text/plain, form encodings), never with this one.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, CodeInvalidRequest, "Content-Type must be application/json")
		return
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	if _, present := r.Header[HeaderIdempotencyKey]; present && !validKey(key) {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest,
			fmt.Sprintf("%s must be 1 to %d printable ASCII characters", HeaderIdempotencyKey, idempotency.MaxKeyBytes))
		return
	}
	if key == "" {
		// Shed before reading the body: above saturation most POSTs are refused, and
		// decoding and validating each of them took CPU from the orders in flight. (A
		// keyed request is shed after its key's claim instead, so that a replay still
		// returns its order: see Create.)
		if err := s.admitNew(r.Context()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	var req CreateRequest
	if status, msg := decodeBody(w, r, &req); status != 0 {
		code := CodeInvalidRequest
		if status == http.StatusRequestEntityTooLarge {
			code = CodePayloadTooLarge
		}
		writeError(w, status, code, msg)
		return
	}
	o, created, err := s.Create(r.Context(), req, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/orders/"+o.ID)
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, s.JSON(o))
		return
	}
	writeJSON(w, http.StatusCreated, s.JSON(o))
}

// validKey: 1..MaxKeyBytes visible ASCII characters.
func validKey(k string) bool {
	if k == "" || len(k) > idempotency.MaxKeyBytes {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// decodeBody decodes exactly one JSON object with known fields from a size-limited body.
// A key that appears twice in one object, also in another letter case (encoding/json
// matches field names case-insensitively and keeps the last), is refused: two readers
// of the body could otherwise see two different orders.
// It returns a status and a client-safe message on failure, or 0.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) (int, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err == nil {
		if k, dup := duplicateKey(body); dup {
			if len(k) > 64 {
				k = k[:64]
			}
			return http.StatusBadRequest, fmt.Sprintf("key %q appears twice in one object", k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err == nil {
		err = dec.Decode(v)
	}
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			return http.StatusBadRequest, "body must hold exactly one JSON object"
		}
		return 0, ""
	}
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than %d bytes", MaxBodyBytes)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, "body is empty; expected a JSON object"
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, "body is not valid JSON"
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return http.StatusBadRequest, "body must be a JSON object"
		}
		return http.StatusBadRequest, fmt.Sprintf("field %s must be a JSON %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return http.StatusBadRequest, "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return http.StatusBadRequest, "body is not a valid order request"
}

// duplicateKey reports the first key that appears twice, compared case-insensitively,
// in one object of the JSON text b. Invalid JSON has none (the decoder reports it).
func duplicateKey(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		keys   map[string]bool // nil for an array
		expect bool            // the next token of an object is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			top := &stack[n-1]
			if top.expect {
				if k, ok := tok.(string); ok {
					lk := strings.ToLower(k)
					if top.keys[lk] {
						return k, true
					}
					top.keys[lk] = true
					top.expect = false
					continue
				}
			} else if d, ok := tok.(json.Delim); !ok || d == '{' || d == '[' {
				top.expect = true // a value (a nested one ends before the next key)
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, expect: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"):
		return "integer"
	case goKind == "string":
		return "string"
	case goKind == "slice":
		return "array"
	case goKind == "struct":
		return "object"
	}
	return "value of another type"
}

// CountsJSON is the answer of GET /orders/counts.
type CountsJSON struct {
	ByState map[State]int64 `json:"by_state"`
	Stuck   map[State]int64 `json:"stuck"`
}

func (s *Service) handleCounts(w http.ResponseWriter, r *http.Request) {
	by, err := s.CountByState(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	stuck, err := s.CountStuck(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, CountsJSON{ByState: by, Stuck: stuck})
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
		writeError(w, http.StatusNotFound, CodeNotFound, "order not found")
		return
	}
	o, hist, err := s.Get(withOrder(r.Context(), id), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	j := s.JSON(o)
	j.History = make([]HistoryJSON, len(hist))
	for i, h := range hist {
		j.History[i] = HistoryJSON{From: h.From, To: h.To, CauseEventID: h.CauseEventID,
			CauseEventType: h.CauseEventType, Ignored: h.Ignored, Note: h.Note, At: h.At.UTC()}
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
		writeError(w, http.StatusNotFound, CodeNotFound, "order not found")
		return
	}
	o, err := s.Cancel(r.Context(), id)
	if errors.Is(err, ErrInvalidTransition) {
		writeError(w, http.StatusConflict, CodeInvalidTransition,
			fmt.Sprintf("order is %s; only PENDING orders can be cancelled", o.State))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, s.JSON(o))
}

func (s *Service) handleRetryCompensation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
		writeError(w, http.StatusNotFound, CodeNotFound, "order not found")
		return
	}
	o, err := s.RetryCompensation(r.Context(), id)
	if errors.Is(err, ErrInvalidTransition) {
		writeError(w, http.StatusConflict, CodeInvalidTransition,
			fmt.Sprintf("order is %s; only CANCELLING or COMPENSATION_FAILED orders can have their compensation retried", o.State))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, s.JSON(o))
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	lq, msg := parseListQuery(r)
	if msg != "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, msg)
		return
	}
	orders, err := s.List(r.Context(), lq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := ListJSON{Orders: make([]OrderJSON, len(orders))}
	for i, o := range orders {
		j := s.JSON(o)
		age := o.Age.Seconds()
		j.AgeSeconds = &age
		out.Orders[i] = j
	}
	writeJSON(w, http.StatusOK, out)
}

// parseListQuery validates the query of GET /orders; unknown parameters are rejected so
// that a typo never silently widens the result.
func parseListQuery(r *http.Request) (ListQuery, string) {
	var lq ListQuery
	q := r.URL.Query()
	for k, vs := range q {
		if len(vs) > 1 {
			return lq, "parameter " + k + " is given more than once"
		}
		v := vs[0]
		switch k {
		case "state":
			st := State(strings.ToUpper(v))
			if !st.Valid() {
				return lq, "state must be one of PENDING, CANCELLING, CONFIRMED, REJECTED, CANCELLED, COMPENSATION_FAILED"
			}
			lq.State = st
		case "stuck":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return lq, "stuck must be true or false"
			}
			lq.Stuck = b
		case "older_than":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return lq, `older_than must be a positive duration such as "90s" or "5m"`
			}
			lq.OlderThan = d
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				return lq, fmt.Sprintf("limit must be an integer from 1 to %d", MaxListLimit)
			}
			lq.Limit = n
		default:
			return lq, "unknown parameter " + strconv.Quote(k) + " (known: state, stuck, older_than, limit)"
		}
	}
	return lq, ""
}
