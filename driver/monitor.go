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
	everyPeriod(ctx, cfg.GPUSamplePeriod, h, "GPU sample failed", func() error {
		u, err := sampler.sample(func() map[uint32]bool { return pidSet(taskProcesses(h.pid, h.startTicks)) })
		if err != nil {
			return err
		}
		h.setGPU(u)
		if !u.HasUtil {
			return nil
		}
		now := time.Now()
		switch mon.observe(now, u.Util) {
		case becameIdle:
			d.emit(h.cfg, idleMessage(u, cfg.IdleThreshold, mon.idleFor(now), h.gpus), map[string]string{"steward.event": "gpu-idle"})
		case becameBusy:
			d.emit(h.cfg, busyMessage(u, cfg.BusyThreshold, h.gpus), map[string]string{"steward.event": "gpu-busy"})
		}
		return nil
	})
}

// everyPeriod runs step every period until ctx ends. A failing step is
// logged once, as what, until it fails differently or succeeds again, not
// every period.
func everyPeriod(ctx context.Context, period time.Duration, h *taskHandle, what string, step func() error) {
	t := time.NewTicker(period)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := step()
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() != lastErr:
			h.logger.Warn(what, "error", err)
			lastErr = err.Error()
		}
	}
}

func pidSet(procs []procStat) map[uint32]bool {
	m := make(map[uint32]bool, len(procs))
	for _, p := range procs {
		m[uint32(p.Pid)] = true
	}
	return m
}
