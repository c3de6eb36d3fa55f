package devbroker

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// frame encodes req as a client sends it: size, key, version, correlation id, client id,
// header tags when flexible, body.
func frame(req kmsg.Request, version int16) []byte {
	req.SetVersion(version)
	var b []byte
	b = kbin.AppendInt16(b, req.Key())
	b = kbin.AppendInt16(b, version)
	b = kbin.AppendInt32(b, 7)
	b = kbin.AppendNullableString(b, kmsg.StringPtr("client"))
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	return append(kbin.AppendInt32(nil, int32(len(b))), b...)
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	for _, o := range []Option{WithGrace(0), WithInterval(-time.Second), WithLogger(nil)} {
		if _, err := New(o); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("err = %v, want ErrInvalidConfig", err)
		}
	}
}

// Group requests are found in the byte stream however the reads split it, other requests
// are skipped, and a member whose connections are all closed is reported once the grace
// period (dynamic) or its session timeout (static) has passed, not before.
func TestConnTracksMembers(t *testing.T) {
	g, err := New(WithLogger(slog.New(slog.DiscardHandler)), WithGrace(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.MemberID, join.SessionTimeoutMillis, join.ProtocolType = "grp", "m-1", 6000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "cooperative-sticky", Metadata: []byte{1, 2, 3}}}
	static := kmsg.NewPtrJoinGroupRequest()
	static.Group, static.InstanceID, static.SessionTimeoutMillis, static.ProtocolType = "grp", kmsg.StringPtr("svc-a"), 20000, "consumer"
	static.Protocols = join.Protocols
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID = "grp", "m-1"
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks = -1

	var stream []byte
	for _, f := range [][]byte{frame(produce, 9), frame(join, 9), frame(produce, 3), frame(hb, 4), frame(static, 5)} {
		stream = append(stream, f...)
	}
	for _, chunk := range []int{1, 3, 7, len(stream)} {
		c := &conn{g: g, keys: map[memberKey]struct{}{}}
		for p := stream; len(p) > 0; {
			n := min(chunk, len(p))
			c.feed(p[:n])
			p = p[n:]
		}
		dyn, inst := memberKey{group: "grp", id: "m-1"}, memberKey{group: "grp", id: "svc-a", instance: true}
		g.mu.Lock()
		r, ri := g.records[dyn], g.records[inst]
		ok := r != nil && len(r.conns) == 1 && r.sessionTimeout == 6*time.Second &&
			ri != nil && len(ri.conns) == 1 && ri.sessionTimeout == 20*time.Second
		g.mu.Unlock()
		if !ok {
			t.Fatalf("reads of %d bytes: records %+v", chunk, g.records)
		}

		info := &kfake.GroupInfo{Members: []kfake.GroupMember{
			{MemberID: "m-1"}, {MemberID: "svc-a-x", InstanceID: kmsg.StringPtr("svc-a")}, {MemberID: "restored"},
		}}
		now := time.Now()
		if ev := g.dead("grp", info, now.Add(time.Hour)); len(ev) != 0 {
			t.Fatalf("evicted %+v while the connection is open", ev)
		}
		g.closed(c)
		if ev := g.dead("grp", info, now.Add(time.Second)); len(ev) != 0 {
			t.Fatalf("evicted %+v within the grace period", ev)
		}
		ev := g.dead("grp", info, now.Add(3*time.Second))
		if len(ev) != 1 || ev[0].member != "m-1" {
			t.Fatalf("after the grace period: %+v, want m-1 only", ev)
		}
		ev = g.dead("grp", info, now.Add(21*time.Second))
		if len(ev) != 1 || ev[0].member != "svc-a-x" || *ev[0].instance != "svc-a" {
			t.Fatalf("after the session timeout: %+v, want the static member only", ev)
		}
		if len(g.records) != 0 {
			t.Fatalf("records left: %+v", g.records)
		}
	}
}
