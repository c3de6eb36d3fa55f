package chaos

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// metadataOf is a cluster of brokers 1..3 (those listed in live) with one topic whose
// partitions have the given leaders, replicas on every broker and the given ISRs.
func metadataOf(live []int32, leaders []int32, isrs [][]int32) kadm.Metadata {
	m := kadm.Metadata{Topics: kadm.TopicDetails{"t": {Topic: "t", Partitions: kadm.PartitionDetails{}}}}
	for _, id := range live {
		m.Brokers = append(m.Brokers, kadm.BrokerDetail{NodeID: id})
	}
	for i, l := range leaders {
		m.Topics["t"].Partitions[int32(i)] = kadm.PartitionDetail{Topic: "t", Partition: int32(i), Leader: l,
			Replicas: []int32{1, 2, 3}, ISR: isrs[i]}
	}
	return m
}

func TestMostLeader(t *testing.T) {
	all := []int32{1, 2, 3}
	m := metadataOf(all, []int32{2, 2, 3, 1, 2, -1}, [][]int32{all, all, all, all, all, {1}})
	if id, led, total := mostLeader(m, 3, -1); id != 2 || led != 3 || total != 6 {
		t.Errorf("mostLeader = broker %d leading %d of %d, want broker 2 leading 3 of 6", id, led, total)
	}
	// The second kill avoids the first broker; 1 and 3 tie, the lower id wins.
	if id, led, _ := mostLeader(m, 3, 2); id != 1 || led != 1 {
		t.Errorf("mostLeader avoiding 2 = broker %d leading %d, want broker 1 leading 1", id, led)
	}
}

func TestOutOfSync(t *testing.T) {
	all := []int32{1, 2, 3}
	for _, c := range []struct {
		name string
		m    kadm.Metadata
		back bool
	}{
		{"fenced or down: not listed", metadataOf([]int32{1, 2}, []int32{1, 2}, [][]int32{{1, 2}, {1, 2}}), false},
		{"listed, out of one ISR", metadataOf(all, []int32{1, 2}, [][]int32{all, {1, 2}}), false},
		{"listed and in every ISR", metadataOf(all, []int32{1, 2}, [][]int32{all, {2, 3, 1}}), true},
	} {
		if why := outOfSync(c.m, 3); (why == "") != c.back {
			t.Errorf("%s: outOfSync(broker 3) = %q, want back %v", c.name, why, c.back)
		}
	}
}

// TestBrokerScenariosListed: make chaos and cmd/chaos -scenarios reach the scenarios on
// Apache Kafka, each on three nodes.
func TestBrokerScenariosListed(t *testing.T) {
	for _, name := range []string{"broker-leader-kill", "broker-pause", "broker-roll"} {
		found := false
		for _, sc := range Scenarios {
			if sc.Name == name {
				found = true
				if sc.ApacheNodes != 3 || sc.Faults == nil {
					t.Errorf("%s: ApacheNodes %d, faults set %v; want 3 nodes and faults", name, sc.ApacheNodes, sc.Faults != nil)
				}
			}
		}
		if !found {
			t.Errorf("%s is not in chaos.Scenarios", name)
		}
	}
}
