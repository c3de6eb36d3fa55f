package ordersvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/internal/testenv"
	"github.com/choreo-saga/choreo/services/order/ordersvc"
)

// openAPIPath is the OpenAPI document of the order API.
const openAPIPath = "../../../docs/openapi.yaml"

// TestOpenAPI validates docs/openapi.yaml against the OpenAPI 3.1 schema, then drives the
// real order handler (behind app.RequireBearer, as the service runs it) with valid and
// invalid requests and validates every request and response against the document: a
// request the document calls valid must be valid, one it must refuse must be invalid, and
// every response must match the document's status, headers and body. Every documented
// response except 500 must be produced at least once.
func TestOpenAPI(t *testing.T) {
	spec, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("the document is not valid OpenAPI 3.1:\n%s", describe(verrs))
	}

	const token = "openapi-test-token"
	f := newFixture(t, ordersvc.Settings{})
	c := &apiClient{t: t, v: v, url: serve(t, f.svc, token), token: token, covered: map[string]bool{}}

	const body = validBody
	keyed := map[string]string{"Idempotency-Key": "k-openapi-1"}

	// POST /orders
	created := c.order(c.do("POST /orders", "POST", "/orders", body, nil, 201, valid))
	c.do("POST /orders", "POST", "/orders", body, keyed, 201, valid)
	c.do("POST /orders", "POST", "/orders", body, keyed, 200, valid)
	c.do("POST /orders", "POST", "/orders", strings.Replace(body, "4200", "4300", 1), keyed, 422, valid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c-1","items":[],"amount":1}`, nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":0}`, nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":1,"coupon":"x"}`, nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c 1","items":[{"sku":"a","qty":1}],"amount":1}`, nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"a","qty":1001}],"amount":1}`, nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", "{customer", nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", body, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400, invalid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"`+strings.Repeat("c", ordersvc.MaxBodyBytes)+`"}`, nil, 413, invalid)
	// A key twice in one object: in another letter case (an unknown field to the schema
	// too) or exactly (JSON Schema sees the last value only, so the document can only say
	// it in the 400's description).
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":100,"AMOUNT":200}`, nil, 400, invalid)
	c.do("POST /orders", "POST", "/orders", `{"customer_id":"c-1","items":[{"sku":"a","qty":1}],"amount":100,"amount":200}`, nil, 400, valid)
	// Without Content-Type: application/json (what a cross-site form or no-cors fetch sends).
	c.do("POST /orders", "POST", "/orders", body, map[string]string{"Content-Type": "text/plain"}, 415, invalid)
	c.do("POST /orders", "POST", "/orders", body, map[string]string{"Content-Type": ""}, 415, invalid)

	// GET /orders, /orders/counts, /orders/{id}
	c.do("GET /orders", "GET", "/orders?state=pending&limit=10", "", nil, 200, valid)
	c.do("GET /orders", "GET", "/orders?stuck=true&older_than=1m", "", nil, 200, valid)
	c.do("GET /orders", "GET", "/orders?limit=0", "", nil, 400, invalid)
	c.do("GET /orders", "GET", "/orders?state=LOST", "", nil, 400, invalid)
	c.do("GET /orders/counts", "GET", "/orders/counts", "", nil, 200, valid)
	c.do("GET /orders/{id}", "GET", "/orders/"+created.ID, "", nil, 200, valid)
	c.do("GET /orders/{id}", "GET", "/orders/0190a3d2-0000-7000-8000-000000000000", "", nil, 404, valid)

	// POST /orders/{id}/cancel, /orders/{id}/retry-compensation
	pending := c.order(c.do("POST /orders", "POST", "/orders", body, nil, 201, valid))
	c.do("POST /orders/{id}/retry-compensation", "POST", "/orders/"+pending.ID+"/retry-compensation", "", nil, 409, valid)
	c.do("POST /orders/{id}/cancel", "POST", "/orders/"+pending.ID+"/cancel", "", nil, 202, valid)
	c.do("POST /orders/{id}/cancel", "POST", "/orders/"+pending.ID+"/cancel", "", nil, 202, valid)
	c.do("POST /orders/{id}/retry-compensation", "POST", "/orders/"+pending.ID+"/retry-compensation", "", nil, 202, valid)
	c.do("GET /orders/{id}", "GET", "/orders/"+pending.ID, "", nil, 200, valid)
	c.do("POST /orders/{id}/cancel", "POST", "/orders/not-an-id/cancel", "", nil, 404, valid)
	// What a page of another site makes a browser send: cross-site fetch metadata, a
	// non-JSON body (which the document, declaring no body, cannot refuse: the 415 says it).
	crossSite := map[string]string{"Sec-Fetch-Site": "cross-site"}
	textPlain := map[string]string{"Content-Type": "text/plain"}
	c.do("POST /orders", "POST", "/orders", body, crossSite, 403, valid)
	c.do("POST /orders/{id}/cancel", "POST", "/orders/"+pending.ID+"/cancel", "", crossSite, 403, valid)
	c.do("POST /orders/{id}/cancel", "POST", "/orders/"+pending.ID+"/cancel", "x", textPlain, 415, valid)
	c.do("POST /orders/{id}/retry-compensation", "POST", "/orders/"+pending.ID+"/retry-compensation", "", crossSite, 403, valid)
	c.do("POST /orders/{id}/retry-compensation", "POST", "/orders/"+pending.ID+"/retry-compensation", "x", textPlain, 415, valid)
	// A settled order can be neither cancelled nor compensated again.
	if _, err := f.pool.Exec(context.Background(), `UPDATE orders SET state = 'CONFIRMED' WHERE id = $1`, created.ID); err != nil {
		t.Fatal(err)
	}
	c.do("POST /orders/{id}/cancel", "POST", "/orders/"+created.ID+"/cancel", "", nil, 409, valid)
	c.do("POST /orders/{id}/retry-compensation", "POST", "/orders/"+created.ID+"/retry-compensation", "", nil, 409, valid)
	c.do("POST /orders/{id}/retry-compensation", "POST", "/orders/0190a3d2-0000-7000-8000-000000000000/retry-compensation", "", nil, 404, valid)

	// 401 on every route without the token.
	for _, r := range routes(created.ID) {
		c.token = ""
		c.do(r.op, r.method, r.path, r.body, nil, 401, valid)
		c.token = token
	}

	// 503 overloaded: the saga is at ORDER_MAX_PENDING.
	full := newFixture(t, ordersvc.Settings{}, ordersvc.WithMaxPending(1))
	c.url = serve(t, full.svc, token)
	c.do("POST /orders", "POST", "/orders", body, nil, 201, valid)
	resp := c.do("POST /orders", "POST", "/orders", body, nil, 503, valid)
	if code := errorCode(t, resp.body); code != ordersvc.CodeOverloaded {
		t.Errorf("at the pending limit: code %q, want %q", code, ordersvc.CodeOverloaded)
	}

	// 503 unavailable on every route: the service's database does not exist.
	c.url = serve(t, unavailableService(t), token)
	for _, r := range routes("0190a3d2-0000-7000-8000-000000000000") {
		resp := c.do(r.op, r.method, r.path, r.body, nil, 503, valid)
		if code := errorCode(t, resp.body); code != ordersvc.CodeUnavailable {
			t.Errorf("%s without a database: code %q, want %q", r.op, code, ordersvc.CodeUnavailable)
		}
	}

	// The validator is not a rubber stamp: a response that breaks the document fails.
	tampered := bytes.Replace(c.last.body, []byte(`"code":"unavailable"`), []byte(`"code":"no such code"`), 1)
	if ok, _ := v.ValidateHttpResponse(c.last.req, response(c.last.resp, tampered)); ok {
		t.Error("a response with an undocumented error code passed validation")
	}
	noRetryAfter := response(c.last.resp, c.last.body)
	noRetryAfter.Header = noRetryAfter.Header.Clone()
	noRetryAfter.Header.Del("Retry-After")
	if ok, _ := v.ValidateHttpResponse(c.last.req, noRetryAfter); ok {
		t.Error("a 503 without Retry-After passed validation")
	}

	// Every documented response (but 500, which the handler only gives on a bug) was seen.
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for status := range op.Responses.Codes.KeysFromOldest() {
				key := fmt.Sprintf("%s %s %s", strings.ToUpper(method), path, status)
				if status != "500" && !c.covered[key] {
					t.Errorf("documented response %s was never produced", key)
				}
			}
		}
	}
}

// request validity the document must give a request.
const (
	valid   = true
	invalid = false
)

type route struct{ op, method, path, body string }

// routes lists one request per operation, on order id.
func routes(id string) []route {
	return []route{
		{"POST /orders", "POST", "/orders", validBody},
		{"GET /orders", "GET", "/orders", ""},
		{"GET /orders/counts", "GET", "/orders/counts", ""},
		{"GET /orders/{id}", "GET", "/orders/" + id, ""},
		{"POST /orders/{id}/cancel", "POST", "/orders/" + id + "/cancel", ""},
		{"POST /orders/{id}/retry-compensation", "POST", "/orders/" + id + "/retry-compensation", ""},
	}
}

// serve serves svc's API as the service does (bearer token on every route) and returns
// its URL.
func serve(t *testing.T, svc *ordersvc.Service, token string) string {
	t.Helper()
	mux := http.NewServeMux()
	svc.Register(func(pattern string, h http.Handler) { mux.Handle(pattern, app.RequireBearer(token, h)) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// unavailableService is an order service whose database does not exist.
func unavailableService(t *testing.T) *ordersvc.Service {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = "choreo_no_such_database"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	svc, err := ordersvc.New(pool, ordersvc.Settings{}, ordersvc.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// exchange is one request and its response, with the response body read.
type exchange struct {
	req  *http.Request
	resp *http.Response
	body []byte
}

// apiClient sends requests and validates each exchange against the document.
type apiClient struct {
	t       *testing.T
	v       validator.Validator
	url     string
	token   string
	covered map[string]bool // "METHOD /path/template status"
	last    exchange
}

// do sends method path with body (Content-Type application/json unless header sets it;
// an empty value removes a header) and header, and checks the status and the validation of the request (wantValid) and
// of the response.
func (c *apiClient) do(op, method, path, body string, header map[string]string, status int, wantValid bool) exchange {
	t := c.t
	t.Helper()
	newReq := func() *http.Request {
		req := newRequest(t, method, c.url+path, body, header)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		return req
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s %s", method, truncate(path))
	if resp.StatusCode != status {
		t.Fatalf("%s: status %d, want %d: %s", name, resp.StatusCode, status, truncate(string(got)))
	}
	if ok, verrs := c.v.ValidateHttpRequest(newReq()); ok != wantValid {
		t.Errorf("%s: request valid by the document = %v, want %v\n%s", name, ok, wantValid, describe(verrs))
	}
	req := newReq()
	if ok, verrs := c.v.ValidateHttpResponse(req, response(resp, got)); !ok {
		t.Errorf("%s: the %d response does not match the document:\n%s\nbody: %s", name, status, describe(verrs), truncate(string(got)))
	}
	op, template, _ := strings.Cut(op, " ")
	c.covered[fmt.Sprintf("%s %s %d", op, template, status)] = true
	c.last = exchange{req: req, resp: resp, body: got}
	return c.last
}

// order decodes the order of a 200 or 201 exchange.
func (c *apiClient) order(e exchange) ordersvc.OrderJSON {
	c.t.Helper()
	var o ordersvc.OrderJSON
	if err := json.Unmarshal(e.body, &o); err != nil {
		c.t.Fatal(err)
	}
	return o
}

// response is resp with body as its body again.
func response(resp *http.Response, body []byte) *http.Response {
	r := *resp
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return &r
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e ordersvc.ErrorJSON
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	return e.Error.Code
}

// describe renders validation errors, one a line.
func describe(errs []*verrors.ValidationError) string {
	var lines []string
	for _, e := range errs {
		line := e.Message + ": " + e.Reason
		for _, s := range e.SchemaValidationErrors {
			line += "; " + s.Reason + " at " + s.FieldPath
		}
		lines = append(lines, "  "+line)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
