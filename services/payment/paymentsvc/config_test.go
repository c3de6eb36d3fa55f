package paymentsvc

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
)

func TestParseCustomers(t *testing.T) {
	tests := []struct {
		in      string
		want    []Customer
		wantErr string
	}{
		{in: "c-1:100", want: []Customer{{"c-1", 100, 100}}},
		{in: "c-1..c-3:500:50, c-poor:10:1", want: []Customer{{"c-1", 500, 50}, {"c-2", 500, 50}, {"c-3", 500, 50}, {"c-poor", 10, 1}}},
		{in: "c-8..10:1", want: []Customer{{"c-8", 1, 1}, {"c-9", 1, 1}, {"c-10", 1, 1}}},
		{in: "", want: nil},
		{in: "c-1", wantErr: "want ID:BALANCE"},
		{in: "c-1:-5", wantErr: "balance"},
		{in: "c-1:5:x", wantErr: "limit"},
		{in: "c-1:5,c-1:6", wantErr: "listed twice"},
		{in: "c-3..c-1:5", wantErr: "empty"},
		{in: "a-1..b-3:5", wantErr: "same prefix"},
		{in: "c-a..c-b:5", wantErr: "numeric suffix"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCustomers(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	env := app.MapEnv(nil)
	c := LoadConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if len(c.Customers) != 102 || c.App.HTTPAddr != DefaultHTTPAddr || !slices.Equal(c.HangCustomers, []string{"c-hang"}) ||
		c.Group != DefaultGroup || !strings.HasSuffix(c.App.DatabaseName(), "choreo_payment") {
		t.Fatalf("defaults: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	env = app.MapEnv(map[string]string{
		EnvLatency: "20ms", EnvFailureRate: "0.25", EnvHangCustomers: "none", EnvSeedCustomers: "x:1",
	})
	c = LoadConfig(env)
	if err := env.Err(); err != nil || c.Latency != 20*time.Millisecond || c.FailureRate != 0.25 || c.HangCustomers != nil || len(c.Customers) != 1 {
		t.Fatalf("overrides: %+v %v", c, err)
	}

	env = app.MapEnv(map[string]string{EnvFailureRate: "1.5", EnvLatency: "soon", EnvSeedCustomers: "c-1"})
	LoadConfig(env)
	err := env.Err()
	if !errors.Is(err, app.ErrConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, key := range []string{EnvFailureRate, EnvLatency, EnvSeedCustomers} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
}
