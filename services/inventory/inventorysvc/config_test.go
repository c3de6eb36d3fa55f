package inventorysvc

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
)

func TestParseStock(t *testing.T) {
	tests := []struct {
		in      string
		want    []Stock
		wantErr string
	}{
		{in: "sku-1:5", want: []Stock{{"sku-1", 5}}},
		{in: "sku-1..sku-3:7, sku-rare:0", want: []Stock{{"sku-1", 7}, {"sku-2", 7}, {"sku-3", 7}, {"sku-rare", 0}}},
		{in: "sku-1", wantErr: "want SKU:QTY"},
		{in: "sku-1:-1", wantErr: "non-negative"},
		{in: "sku-1:1,sku-1:2", wantErr: "listed twice"},
		{in: "a-1..b-2:1", wantErr: "same prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseStock(tc.in)
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
	if len(c.Stock) != 21 || c.ReservationTTL != DefaultReservationTTL || c.App.HTTPAddr != DefaultHTTPAddr || c.Validate() != nil {
		t.Fatalf("defaults: %+v", c)
	}
	env = app.MapEnv(map[string]string{EnvReservationTTL: "0s", EnvSweepInterval: "fast", EnvSeed: "x", app.EnvKafkaBrokers: "nohost"})
	LoadConfig(env)
	err := env.Err()
	if !errors.Is(err, app.ErrConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, key := range []string{EnvReservationTTL, EnvSweepInterval, EnvSeed, app.EnvKafkaBrokers} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
	env = app.MapEnv(map[string]string{EnvReservationTTL: "2m"})
	if c := LoadConfig(env); c.ReservationTTL != 2*time.Minute {
		t.Fatalf("ttl %v", c.ReservationTTL)
	}
}
