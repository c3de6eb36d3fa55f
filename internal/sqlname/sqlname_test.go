package sqlname

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in, quoted, schema, table string
	}{
		{"choreo_idempotency", `"choreo_idempotency"`, "", "choreo_idempotency"},
		{"billing.Idem Keys", `"billing"."Idem Keys"`, "billing", "Idem Keys"},
		{`odd"name`, `"odd""name"`, "", `odd"name`},
	} {
		n, err := Parse(tt.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.in, err)
		}
		if n.Quoted() != tt.quoted || n.Schema() != tt.schema || n.Table() != tt.table || n.String() != tt.in {
			t.Errorf("Parse(%q) = %q %q %q %q", tt.in, n.Quoted(), n.Schema(), n.Table(), n.String())
		}
	}
	for _, bad := range []string{"", ".", "a.", ".a", "a.b.c", strings.Repeat("x", MaxPartLen+1), "a\x00b"} {
		if _, err := Parse(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestDerivedAndSuffix(t *testing.T) {
	n := MustParse("billing.outbox")
	if got := n.Derived("_idx"); got != `"outbox_idx"` {
		t.Errorf("Derived = %s", got)
	}
	if got := n.WithSuffix("_dead").Quoted(); got != `"billing"."outbox_dead"` {
		t.Errorf("WithSuffix = %s", got)
	}
}

func TestPlain(t *testing.T) {
	for name, want := range map[string]bool{
		"choreo_outbox": true, "billing.outbox": true, "Outbox": false, "a-b": false,
		"x; DROP TABLE y": false, strings.Repeat("x", 49): false, strings.Repeat("x", 48): true,
	} {
		if got := MustParse(name).Plain(48); got != want {
			t.Errorf("Plain(%q) = %v, want %v", name, got, want)
		}
	}
}
