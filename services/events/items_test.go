package events_test

import (
	"testing"

	"github.com/choreo-saga/choreo/services/events"
)

func TestSameItems(t *testing.T) {
	for _, tc := range []struct {
		a, b []events.Item
		want bool
	}{
		{nil, nil, true},
		{[]events.Item{{"a", 1}, {"b", 2}}, []events.Item{{"b", 2}, {"a", 1}}, true},
		{[]events.Item{{"a", 2}}, []events.Item{{"a", 1}, {"a", 1}}, true},
		{[]events.Item{{"a", 1}}, []events.Item{{"a", 2}}, false},
		{[]events.Item{{"sku-8", 1}}, []events.Item{{"sku-9", 1000}}, false},
		{[]events.Item{{"a", 1}}, nil, false},
		{[]events.Item{{"a", 1}, {"b", 1}}, []events.Item{{"a", 1}}, false},
	} {
		if got := events.SameItems(tc.a, tc.b); got != tc.want {
			t.Errorf("SameItems(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
