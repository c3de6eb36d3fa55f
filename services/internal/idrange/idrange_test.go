package idrange_test

import (
	"slices"
	"testing"

	"github.com/choreo-saga/choreo/services/internal/idrange"
)

func TestExpand(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "c-poor", want: []string{"c-poor"}},
		{in: "c-1..c-3", want: []string{"c-1", "c-2", "c-3"}},
		{in: "sku-9..11", want: []string{"sku-9", "sku-10", "sku-11"}},
		{in: "c-5..c-5", want: []string{"c-5"}},
		{in: "", wantErr: true},
		{in: "c-3..c-1", wantErr: true},
		{in: "c-1..d-3", wantErr: true},
		{in: "c-x..c-3", wantErr: true},
		{in: "c-1..c-2000000", wantErr: true},
	}
	for _, tt := range tests {
		got, err := idrange.Expand(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("Expand(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
