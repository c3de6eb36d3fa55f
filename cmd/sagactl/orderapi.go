package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Order is an order as the order service's HTTP API returns it.
type Order struct {
	ID         string     `json:"id"`
	CustomerID string     `json:"customer_id"`
	Items      []Item     `json:"items"`
	Amount     int64      `json:"amount"`
	State      string     `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	Payment    string     `json:"payment_status,omitempty"`
	Stock      string     `json:"stock_status,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StateSince time.Time  `json:"state_since,omitzero"`
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
	// CompensationAttempts counts the sends of the order's cancellation.
	CompensationAttempts int          `json:"compensation_attempts,omitempty"`
	TraceID              string       `json:"trace_id"`
	JaegerURL            string       `json:"jaeger_url"`
	Stuck                bool         `json:"stuck"`
	AgeSeconds           float64      `json:"age_seconds,omitempty"`
	History              []Transition `json:"history,omitempty"`
}

// Item is one line of an order.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Transition is one entry of an order's state history.
type Transition struct {
	From           string `json:"from"`
	To             string `json:"to"`
	CauseEventID   string `json:"cause_event_id"`
	CauseEventType string `json:"cause_event_type"`
	// Ignored marks an event the order recorded without changing state (Note says why).
	Ignored bool      `json:"ignored,omitempty"`
	Note    string    `json:"note,omitempty"`
	At      time.Time `json:"at"`
}

// terminal reports whether state is one where the saga has stopped (an operator or a late
// refund or release can still move a COMPENSATION_FAILED order).
func terminal(state string) bool {
	switch state {
	case "CONFIRMED", "REJECTED", "CANCELLED", "COMPENSATION_FAILED":
		return true
	}
	return false
}

// Age is how long ago the order was created, as the service reported it (age_seconds) or
// computed from created_at against now.
func (o Order) Age(now time.Time) time.Duration {
	if o.AgeSeconds > 0 {
		return time.Duration(o.AgeSeconds * float64(time.Second))
	}
	if o.CreatedAt.IsZero() {
		return 0
	}
	return now.Sub(o.CreatedAt)
}

// SettledIn is the saga's duration by the service's clock: created_at to the last
// transition into a terminal state. ok is false while the order is not terminal.
func (o Order) SettledIn() (d time.Duration, ok bool) {
	if !terminal(o.State) || o.CreatedAt.IsZero() {
		return 0, false
	}
	for i := len(o.History) - 1; i >= 0; i-- {
		if h := o.History[i]; h.To == o.State && !h.Ignored && !h.At.IsZero() {
			return h.At.Sub(o.CreatedAt), true
		}
	}
	if !o.StateSince.IsZero() {
		return o.StateSince.Sub(o.CreatedAt), true
	}
	if !o.UpdatedAt.IsZero() {
		return o.UpdatedAt.Sub(o.CreatedAt), true
	}
	return 0, false
}

// Cause is the event type of the transition into the current state ("" if unknown).
func (o Order) Cause() string {
	for i := len(o.History) - 1; i >= 0; i-- {
		if h := o.History[i]; h.To == o.State && !h.Ignored {
			return h.CauseEventType
		}
	}
	return ""
}

// apiError is an error answer of the order API.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("order service: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("order service: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

func (e *apiError) Unwrap() error {
	if e.Status == http.StatusNotFound {
		return errNotFound
	}
	return nil
}

// orderAPI is a client of the order service's HTTP API.
type orderAPI struct {
	base  string
	http  *http.Client
	token string // bearer token, if the API requires one
}

// orderAPI returns the order API client of c: its URL, timeout and token.
func (c conn) orderAPI() (*orderAPI, error) {
	a, err := newOrderAPI(c.orderURL, c.timeout)
	if err != nil {
		return nil, err
	}
	a.token = c.orderToken
	return a, nil
}

func newOrderAPI(base string, timeout time.Duration) (*orderAPI, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: order URL %q must be http(s)://host:port", errUsage, redactURL(base))
	}
	return &orderAPI{
		base: strings.TrimRight(base, "/"),
		http: &http.Client{Timeout: timeout, Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		}},
	}, nil
}

// PlaceOrderRequest is the body of POST /orders.
type PlaceOrderRequest struct {
	CustomerID string `json:"customer_id"`
	Items      []Item `json:"items"`
	Amount     int64  `json:"amount"`
}

// Place creates an order; idemKey makes a retry of the same request return the same order.
func (a *orderAPI) Place(ctx context.Context, req PlaceOrderRequest, idemKey string) (Order, error) {
	var o Order
	h := http.Header{}
	if idemKey != "" {
		h.Set("Idempotency-Key", idemKey)
	}
	err := a.do(ctx, http.MethodPost, "/orders", h, req, &o)
	return o, err
}

// Get returns one order with its history.
func (a *orderAPI) Get(ctx context.Context, id string) (Order, error) {
	var o Order
	err := a.do(ctx, http.MethodGet, "/orders/"+url.PathEscape(id), nil, nil, &o)
	return o, err
}

// Cancel asks for an order's cancellation.
func (a *orderAPI) Cancel(ctx context.Context, id string) (Order, error) {
	var o Order
	err := a.do(ctx, http.MethodPost, "/orders/"+url.PathEscape(id)+"/cancel", nil, nil, &o)
	return o, err
}

// RetryCompensation re-sends the cancellation of a CANCELLING or COMPENSATION_FAILED
// order.
func (a *orderAPI) RetryCompensation(ctx context.Context, id string) (Order, error) {
	var o Order
	err := a.do(ctx, http.MethodPost, "/orders/"+url.PathEscape(id)+"/retry-compensation", nil, nil, &o)
	return o, err
}

// List returns orders matching q (state, stuck, older_than, limit).
func (a *orderAPI) List(ctx context.Context, q url.Values) ([]Order, error) {
	var out struct {
		Orders []Order `json:"orders"`
	}
	path := "/orders"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	err := a.do(ctx, http.MethodGet, path, nil, nil, &out)
	return out.Orders, err
}

func (a *orderAPI) do(ctx context.Context, method, path string, h http.Header, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("sagactl: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return fmt.Errorf("sagactl: request: %w", err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() == nil && isConnError(err) {
			return fmt.Errorf("%w: order service at %s: %w (is it running? set -order-url or ORDER_URL)", errUnreachable, redactURL(a.base), withoutURL(err))
		}
		return fmt.Errorf("sagactl: %s %s: %w", method, path, withoutURL(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("sagactl: read %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		ae := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(raw, &e) == nil && (e.Error.Code != "" || e.Error.Message != "") {
			ae.Code, ae.Message = e.Error.Code, e.Error.Message
		} else {
			ae.Message = truncate(strings.TrimSpace(string(raw)), 200)
		}
		return fmt.Errorf("sagactl: %s %s: %w", method, path, ae)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("sagactl: decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// isAPICode reports whether err is an order API error with the given code.
func isAPICode(err error, code string) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Code == code
}
