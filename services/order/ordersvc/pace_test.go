package ordersvc

import (
	"testing"
	"time"
)

// TestPaced: a fast query keeps its period; a slow one waits paceFactor times its
// duration, so it never takes more than a tenth of the time.
func TestPaced(t *testing.T) {
	for _, c := range []struct{ every, took, want time.Duration }{
		{time.Second, 0, time.Second},
		{time.Second, 100 * time.Millisecond, time.Second},
		{time.Second, 340 * time.Millisecond, 3060 * time.Millisecond},
		{200 * time.Millisecond, 50 * time.Millisecond, 450 * time.Millisecond},
	} {
		if got := paced(c.every, c.took); got != c.want {
			t.Errorf("paced(%v, %v) = %v, want %v", c.every, c.took, got, c.want)
		}
		if got := paced(c.every, c.took); c.took > 0 && float64(c.took)/float64(got+c.took) > 0.1+1e-9 {
			t.Errorf("paced(%v, %v): the query takes %.2f of the time", c.every, c.took, float64(c.took)/float64(got+c.took))
		}
	}
}
