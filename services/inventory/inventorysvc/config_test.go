package inventorysvc

import (
	"testing"
	"time"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
)

func TestParseStock(t *testing.T) {
	apptest.CheckParse(t, ParseStock, []apptest.ParseCase[Stock]{
		{In: "sku-1:5", Want: []Stock{{"sku-1", 5}}},
		{In: "sku-1..sku-3:7, sku-rare:0", Want: []Stock{{"sku-1", 7}, {"sku-2", 7}, {"sku-3", 7}, {"sku-rare", 0}}},
		{In: "sku-1", WantErr: "want SKU:QTY"},
		{In: "sku-1:-1", WantErr: "non-negative"},
		{In: "sku-1:1,sku-1:2", WantErr: "listed twice"},
		{In: "a-1..b-2:1", WantErr: "same prefix"},
	})
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
	env = app.MapEnv(map[string]string{EnvReservationTTL: "0s", EnvSweepInterval: "fast", EnvSeed: "x", "KAFKA_BROKERS": "nohost"})
	LoadConfig(env)
	apptest.WantConfigError(t, env, EnvReservationTTL, EnvSweepInterval, EnvSeed, "KAFKA_BROKERS")
	env = app.MapEnv(map[string]string{EnvReservationTTL: "2m"})
	if c := LoadConfig(env); c.ReservationTTL != 2*time.Minute {
		t.Fatalf("ttl %v", c.ReservationTTL)
	}
}
