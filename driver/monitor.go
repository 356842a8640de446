package driver

import (
	"context"
	"strings"
	"time"
)

// monitorGPUs samples the task's own GPU activity every gpu_sample_period
// and turns idle/busy transitions into task events.
func (d *Driver) monitorGPUs(ctx context.Context, h *taskHandle) {
	cfg := d.config()
	sampler, err := newGPUSampler(cfg.GPUBackend, deviceEnvOf(h.cfg), d.nvml.open)
	if err != nil {
		h.logger.Warn("no GPU attribution for this task", "gpus", strings.Join(h.gpus, ","), "error", err)
		return
	}
	if sampler == nil {
		return
	}
	defer sampler.close()
	mon := newActivityMonitor(cfg)
	t := time.NewTicker(cfg.GPUSamplePeriod)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u, err := sampler.sample(func() map[uint32]bool { return pidSet(taskProcesses(h.pid, h.startTicks)) })
		if err != nil {
			// Log a failing query once, not every period.
			if err.Error() != lastErr {
				h.logger.Warn("GPU sample failed", "error", err)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		h.setGPU(u)
		if !u.HasUtil {
			continue
		}
		now := time.Now()
		switch mon.observe(now, u.Util) {
		case becameIdle:
			d.emit(h.cfg, idleMessage(u, cfg.IdleThreshold, mon.idleFor(now), h.gpus), map[string]string{"steward.event": "gpu-idle"})
		case becameBusy:
			d.emit(h.cfg, busyMessage(u, cfg.BusyThreshold, h.gpus), map[string]string{"steward.event": "gpu-busy"})
		}
	}
}

func pidSet(procs []procStat) map[uint32]bool {
	m := make(map[uint32]bool, len(procs))
	for _, p := range procs {
		m[uint32(p.pid)] = true
	}
	return m
}
