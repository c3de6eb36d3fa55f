package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// lagOf builds a group's lag: one partition per entry of topic t, owned by member (""
// for none), with its commit and end offsets.
func lagOf(parts ...lagPart) kadm.GroupLag {
	l := kadm.GroupLag{}
	for _, p := range parts {
		if l["t"] == nil {
			l["t"] = map[int32]kadm.GroupMemberLag{}
		}
		var m *kadm.DescribedGroupMember
		if p.member != "" {
			m = &kadm.DescribedGroupMember{MemberID: p.member}
		}
		l["t"][p.p] = kadm.GroupMemberLag{Member: m, Topic: "t", Partition: p.p,
			Commit: kadm.Offset{Topic: "t", Partition: p.p, At: p.commit}, End: kadm.ListedOffset{Topic: "t", Partition: p.p, Offset: p.end}}
	}
	return l
}

type lagPart struct {
	p           int32
	member      string
	commit, end int64
}

// TestUnconsumed: a partition counts as consumed again after a kill only when a live
// member owns it, the backlog of the kill is consumed, and its commit moved or nothing
// waits in it.
func TestUnconsumed(t *testing.T) {
	atKill := lagOf(
		lagPart{0, "dead", 10, 12},
		lagPart{1, "live", 5, 5},
		lagPart{2, "dead", -1, 0}, // never written
		lagPart{3, "dead", 7, 7},
	)
	for _, tt := range []struct {
		name string
		now  kadm.GroupLag
		want []string
	}{
		{"the dead member still owns its partitions", atKill, []string{"t/0", "t/2", "t/3"}},
		{"no owner during the rebalance", lagOf(lagPart{0, "", 10, 12}, lagPart{1, "", 5, 5}, lagPart{2, "", -1, 0}, lagPart{3, "", 7, 7}),
			[]string{"t/0", "t/1", "t/2", "t/3"}},
		{"taken over, the backlog of the kill half consumed", lagOf(lagPart{0, "a", 11, 14}, lagPart{1, "live", 5, 5}, lagPart{2, "a", -1, 0}, lagPart{3, "a", 7, 7}),
			[]string{"t/0"}},
		{"taken over, records waiting and the commit not moved", lagOf(lagPart{0, "a", 12, 14}, lagPart{1, "live", 5, 5}, lagPart{2, "a", -1, 0}, lagPart{3, "a", 7, 9}),
			[]string{"t/3"}},
		{"every partition consumed", lagOf(lagPart{0, "a", 13, 14}, lagPart{1, "live", 6, 6}, lagPart{2, "b", -1, 0}, lagPart{3, "b", 8, 9}),
			nil},
		{"a partition missing from the lag", lagOf(lagPart{0, "a", 13, 14}, lagPart{1, "live", 6, 6}, lagPart{3, "b", 8, 9}),
			[]string{"t/2"}},
	} {
		if got := unconsumed(atKill, tt.now, "dead"); !slices.Equal(got, tt.want) {
			t.Errorf("%s: unconsumed = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPoolSize: the pool covers a member's partitions plus 4 when max_connections
// leaves that much for every instance, is the share otherwise, and a share under 4
// fails.
func TestPoolSize(t *testing.T) {
	for _, tt := range []struct {
		limit, reserved, inUse, procs, perMember int
		want                                     int
		fails                                    bool
	}{
		{500, 3, 6, 12, 48, 38, false}, // (500-3-6-10)/12 - 2 = 38 < 48+4
		{500, 3, 6, 12, 6, 10, false},  // few partitions: what a member needs
		{100, 3, 6, 12, 48, 4, false},  // Postgres's default 100: 81/12 - 2 = 4
		{100, 3, 30, 12, 48, 2, true},  // 57/12 - 2 = 2: too few
		{100, 3, 6, 6, 12, 11, false},  // 81/6 - 2 = 11 < 12+4
	} {
		got, err := poolSize(tt.limit, tt.reserved, tt.inUse, tt.procs, tt.perMember)
		if (err != nil) != tt.fails || !tt.fails && got != tt.want {
			t.Errorf("poolSize(%d, %d, %d, %d, %d) = %d, %v; want %d, fails %v", tt.limit, tt.reserved, tt.inUse, tt.procs, tt.perMember, got, err, tt.want, tt.fails)
		}
	}
}

// TestFigure: each figure is judged against its limit in its direction, a missing one
// fails, and its line shows value and limit.
func TestFigure(t *testing.T) {
	ratio := Figure{Name: "ratio", Value: 0.95, Limit: 0.9, AtLeast: true}
	slow := Figure{Name: "recovery", Value: 21, Unit: "s", Limit: 20}
	if !ratio.OK() || slow.OK() || (Figure{Name: "x", Limit: 1, Missing: true}).OK() || !(Figure{Value: 0, Limit: 0}).OK() {
		t.Error("figures judged wrongly")
	}
	if s := ratio.String(); s != "ratio: 0.95 (limit ≥ 0.90): ok" {
		t.Errorf("ratio line %q", s)
	}
	if s := slow.String(); !strings.HasPrefix(s, "recovery: 21.00 s (limit ≤ 20.00 s): FAIL") {
		t.Errorf("recovery line %q", s)
	}
	tp := throughput{confirmed: 100, first: time.Unix(0, 0), last: time.Unix(4, 0)}
	if got := tp.perSecond(); got != 25 {
		t.Errorf("perSecond = %v, want 25", got)
	}
	if got := (throughput{}).perSecond(); got != 0 {
		t.Errorf("perSecond of nothing = %v, want 0", got)
	}
}

// TestPartitionsByNameOnly: the partitions scenario is reachable by name (chaos.Extra)
// but not one of make chaos's scenarios.
func TestPartitionsByNameOnly(t *testing.T) {
	in := func(scs []Scenario) bool {
		return slices.ContainsFunc(scs, func(sc Scenario) bool { return sc.Name == "partitions" })
	}
	if !in(Extra) || in(Scenarios) {
		t.Errorf("partitions in Extra %v, in Scenarios %v; want only in Extra", in(Extra), in(Scenarios))
	}
}
