package driver

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/client/lib/cpustats"
	cstructs "github.com/hashicorp/nomad/client/structs"
	"github.com/hashicorp/nomad/plugins/drivers"
)

var (
	measuredCPU = []string{"System Mode", "User Mode", "Percent"}
	measuredMem = []string{"RSS"}
)

// TaskStats streams the CPU and memory of the task's processes every
// interval. GPU figures cannot travel here (Nomad's driver protocol drops
// device stats); they come from the device plugin, and the driver turns
// them into events instead.
func (d *Driver) TaskStats(ctx context.Context, taskID string, interval time.Duration) (<-chan *drivers.TaskResourceUsage, error) {
	h, ok := d.tasks.get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	if interval <= 0 {
		interval = time.Second
	}
	d.mu.RLock()
	compute := d.compute
	d.mu.RUnlock()
	ch := make(chan *drivers.TaskResourceUsage)
	go func() {
		defer close(ch)
		s := newStatsCollector(compute)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.ctx.Done():
				return
			case <-h.done:
				return
			case <-t.C:
				t.Reset(interval)
			}
			select {
			case ch <- s.collect(taskProcesses(h.pid, h.startTicks), time.Now()):
			case <-ctx.Done():
				return
			case <-h.done:
				return
			}
		}
	}()
	return ch, nil
}

// statsCollector turns CPU times into percentages between two rounds.
type statsCollector struct {
	compute             cpustats.Compute
	total, user, system *cpustats.Tracker
	pids                map[int]*pidTrackers
}

type pidTrackers struct{ total, user, system *cpustats.Tracker }

func newStatsCollector(c cpustats.Compute) *statsCollector {
	return &statsCollector{compute: c, total: cpustats.New(c), user: cpustats.New(c), system: cpustats.New(c), pids: map[int]*pidTrackers{}}
}

func (s *statsCollector) collect(procs []procStat, now time.Time) *drivers.TaskResourceUsage {
	var user, system time.Duration
	var rss uint64
	pids := make(map[string]*cstructs.ResourceUsage, len(procs))
	seen := make(map[int]bool, len(procs))
	for _, p := range procs {
		user += p.User
		system += p.System
		rss += p.RSSBytes
		pt := s.pids[p.Pid]
		if pt == nil {
			pt = &pidTrackers{cpustats.New(s.compute), cpustats.New(s.compute), cpustats.New(s.compute)}
			s.pids[p.Pid] = pt
		}
		seen[p.Pid] = true
		pids[strconv.Itoa(p.Pid)] = usage(pt.total, pt.user, pt.system, p.User, p.System, p.RSSBytes)
	}
	for pid := range s.pids {
		if !seen[pid] {
			delete(s.pids, pid)
		}
	}
	return &drivers.TaskResourceUsage{
		ResourceUsage: usage(s.total, s.user, s.system, user, system, rss),
		Timestamp:     now.UTC().UnixNano(),
		Pids:          pids,
	}
}

func usage(total, user, system *cpustats.Tracker, u, sys time.Duration, rss uint64) *cstructs.ResourceUsage {
	pct := total.Percent(float64(u + sys))
	return &cstructs.ResourceUsage{
		MemoryStats: &cstructs.MemoryStats{RSS: rss, Measured: measuredMem},
		CpuStats: &cstructs.CpuStats{
			UserMode:   user.Percent(float64(u)),
			SystemMode: system.Percent(float64(sys)),
			Percent:    pct,
			TotalTicks: ticks(total, pct),
			Measured:   measuredCPU,
		},
	}
}

// ticks converts a percentage into MHz the way Nomad does; without the
// agent's CPU topology (tests) it is 0.
func ticks(t *cpustats.Tracker, pct float64) float64 {
	v := t.TicksConsumed(pct)
	if v != v { // NaN: no topology
		return 0
	}
	return v
}
