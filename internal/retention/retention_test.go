package retention

import (
	"testing"
	"time"
)

func TestInterval(t *testing.T) {
	for _, tc := range []struct{ retention, most, want time.Duration }{
		{7 * 24 * time.Hour, 5 * time.Minute, 5 * time.Minute}, // the usual pause
		{time.Hour, 5 * time.Minute, 3 * time.Minute},          // a twentieth
		{2 * time.Minute, 15 * time.Second, 6 * time.Second},
		{4 * time.Second, time.Hour, time.Second}, // at least a second
	} {
		if got := Interval(tc.retention, tc.most); got != tc.want {
			t.Errorf("Interval(%v, %v) = %v, want %v", tc.retention, tc.most, got, tc.want)
		}
	}
}
