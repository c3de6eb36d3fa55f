package paymentsvc

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
)

func TestParseCustomers(t *testing.T) {
	apptest.CheckParse(t, ParseCustomers, []apptest.ParseCase[Customer]{
		{In: "c-1:100", Want: []Customer{{"c-1", 100, 100}}},
		{In: "c-1..c-3:500:50, c-poor:10:1", Want: []Customer{{"c-1", 500, 50}, {"c-2", 500, 50}, {"c-3", 500, 50}, {"c-poor", 10, 1}}},
		{In: "c-8..10:1", Want: []Customer{{"c-8", 1, 1}, {"c-9", 1, 1}, {"c-10", 1, 1}}},
		{In: "", Want: nil},
		{In: "c-1", WantErr: "want ID:BALANCE"},
		{In: "c-1:-5", WantErr: "balance"},
		{In: "c-1:5:x", WantErr: "limit"},
		{In: "c-1:5,c-1:6", WantErr: "listed twice"},
		{In: "c-3..c-1:5", WantErr: "empty"},
		{In: "a-1..b-3:5", WantErr: "same prefix"},
		{In: "c-a..c-b:5", WantErr: "numeric suffix"},
	})
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
	apptest.WantConfigError(t, env, EnvFailureRate, EnvLatency, EnvSeedCustomers)
}
