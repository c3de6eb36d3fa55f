package chaos

import "strings"

// Instance describes one running service instance, for harnesses that measure the
// system from outside (bench/saga): its process, its API and its log.
type Instance struct {
	// Service is payment, inventory or order; Name is e.g. "order-1".
	Service, Name string
	// PID is the process id of the current run (0 when it is not running).
	PID int
	// URL is the instance's own HTTP base URL (no balancer in between).
	URL string
	// LogPath is the file the instance's output is appended to.
	LogPath string
}

// Instances lists every service instance in start order (payment, inventory, order).
func (s *System) Instances() []Instance {
	var out []Instance
	for _, svc := range services {
		for _, p := range s.instances[svc] {
			out = append(out, Instance{Service: svc, Name: p.name, PID: p.pid(),
				URL: strings.TrimSuffix(p.ready, "/readyz"), LogPath: p.logPath})
		}
	}
	return out
}

// Databases maps each service to the name of its database in the shared Postgres.
func (s *System) Databases() map[string]string {
	out := make(map[string]string, len(s.dbs))
	for k, v := range s.dbs {
		out[k] = v
	}
	return out
}

// Infra lists the system's own broker (devkafka, or the Apache Kafka nodes) and Redis
// processes, named by their program, with Service empty and no URL.
func (s *System) Infra() []Instance {
	var out []Instance
	for _, p := range append([]*proc{s.kafka, s.redis}, s.apache...) {
		if p != nil {
			out = append(out, Instance{Name: p.name, PID: p.pid(), LogPath: p.logPath})
		}
	}
	return out
}
