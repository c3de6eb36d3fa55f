package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// instanceSweep is the cost per order with more instances of each service (-sweep): the
// same offered rate, below saturation, against a fresh system per instance count.
type instanceSweep struct {
	Offered    int             `json:"offered_per_sec"`
	Partitions int             `json:"partitions"`
	Points     []instancePoint `json:"points"`
	// Ratio is the last point's system CPU per order over the first's (4 instances over
	// 1 with -sweep 1,2,4); the target is <= 1.15.
	Ratio float64 `json:"last_over_first"`
}

// instancePoint is one instance count's window.
type instancePoint struct {
	Instances       int     `json:"instances"`
	ConfirmedPerSec float64 `json:"confirmed_per_sec"`
	P50ms           float64 `json:"p50_ms"`
	P99ms           float64 `json:"p99_ms"`
	// SystemCPUms is the CPU of the system's processes (services, devkafka, redis, the
	// services' Postgres backends and the load generator) per confirmed order;
	// MachineCPUms the whole machine's (other users' work included).
	SystemCPUms  float64 `json:"system_cpu_ms_per_order"`
	MachineCPUms float64 `json:"machine_cpu_ms_per_order"`
	// ByGroup is SystemCPUms by process group (postgres/<service>: its backends);
	// SwitchesPerOrder the context switches per order by group (wake-ups).
	ByGroup          map[string]float64 `json:"cpu_ms_per_order"`
	SwitchesPerOrder map[string]float64 `json:"context_switches_per_order"`
	// IdleCPUPercent is the services' processes' CPU (% of one core) over 5 s without
	// orders, before the warm-up: what the instances cost when nothing happens.
	IdleCPUPercent float64 `json:"idle_services_cpu_percent"`
}

// idleWindow is how long a sweep point's services are watched idle.
const idleWindow = 5 * time.Second

// sweepInstances offers rate orders/s for cfg.duration to a fresh system of each
// instance count in cfg.sweep, topics of cfg.sweepPartitions partitions.
func sweepInstances(ctx context.Context, cfg config, pgURL string, rate int) (*instanceSweep, error) {
	out := &instanceSweep{Offered: rate, Partitions: cfg.sweepPartitions}
	for _, n := range cfg.sweep {
		p, err := sweepPoint(ctx, cfg, pgURL, rate, n)
		if err != nil {
			return out, err
		}
		out.Points = append(out.Points, p)
		fmt.Fprintf(cfg.log, "saga: %d instance(s) at %d/s: %.1f confirmed/s, %.2f ms CPU per order (machine %.2f)\n",
			n, rate, p.ConfirmedPerSec, p.SystemCPUms, p.MachineCPUms)
	}
	if first := out.Points[0].SystemCPUms; first > 0 {
		out.Ratio = out.Points[len(out.Points)-1].SystemCPUms / first
	}
	return out, nil
}

func sweepPoint(ctx context.Context, cfg config, pgURL string, rate, instances int) (instancePoint, error) {
	s, err := startSession(ctx, cfg, pgURL, instances, cfg.sweepPartitions)
	if err != nil {
		return instancePoint{}, err
	}
	defer s.close()
	idle := map[string][]int{}
	for _, svc := range serviceNames {
		idle[svc] = s.pids[svc]
	}
	pw := newProcWatch(idle)
	time.Sleep(idleWindow)
	var idleCPU time.Duration
	for _, c := range pw.cpu() {
		idleCPU += c
	}
	if cfg.warmup > 0 {
		s.warmup(ctx, cfg, rate, cfg.warmup)
	}
	s.startSampling()
	r, err := runRate(ctx, cfg, rate, cfg.duration, s)
	if err != nil {
		return instancePoint{}, err
	}
	p := instancePoint{Instances: instances, ConfirmedPerSec: r.ConfirmedPerSec, P50ms: r.P50ms, P99ms: r.P99ms,
		ByGroup: map[string]float64{}, SwitchesPerOrder: map[string]float64{}, IdleCPUPercent: pct(idleCPU, idleWindow.Seconds())}
	if r.ConfirmedPerSec <= 0 {
		return p, fmt.Errorf("saga: %d instance(s): nothing confirmed at %d/s", instances, rate)
	}
	perOrder := func(pct float64) float64 { return pct / 100 * 1e3 / r.ConfirmedPerSec }
	for g, st := range r.Services {
		p.ByGroup[g] = perOrder(st.CPUPercent)
		p.SwitchesPerOrder[g] = st.ContextSwitchesPerOrder
		if st.PostgresCPUPercent > 0 {
			p.ByGroup["postgres/"+g] = perOrder(st.PostgresCPUPercent)
			p.SwitchesPerOrder["postgres/"+g] = st.PostgresContextSwitchesPerOrder
		}
	}
	p.ByGroup["generator"] = perOrder(r.GeneratorCPUPercent)
	for _, v := range p.ByGroup {
		p.SystemCPUms += v
	}
	p.MachineCPUms = perOrder(r.MachineCPUPercent * float64(runtime.NumCPU()))
	return p, nil
}
