package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The consumer's client fetches with DefaultFetchMaxWait, and a kgo.FetchMaxWait given to
// WithClientOptions wins over it.
func TestFetchMaxWaitDefault(t *testing.T) {
	h := func(context.Context, *Message) error { return nil }
	for _, tt := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"default", nil, DefaultFetchMaxWait},
		{"user's", []Option{WithClientOptions(kgo.FetchMaxWait(3 * time.Second))}, 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New([]string{"127.0.0.1:1"}, "g", []string{"t"}, h, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(c.clientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.FetchMaxWait); got != tt.want {
				t.Fatalf("FetchMaxWait = %v, want %v", got, tt.want)
			}
		})
	}
}
