package controller

import (
	"context"
	"time"
)

// Nomad's system scheduler preempts on its own (SchedulerConfiguration.
// PreemptionConfig.SystemSchedulerEnabled, on by default): registering a
// system job of a higher priority evicts lower-priority allocations from
// the nodes it needs, with no checkpoint signal and no word to Steward.
// Steward resets a system job's priority to its tier's, but only after
// Nomad placed it: the eviction has happened by then. Operators should
// turn it off (docs/reference/controller.md):
//
//	nomad operator scheduler set-config -preempt-system-scheduler=false
//
// The controller reads the setting at start and every sysPreemptEvery,
// says it in /healthz (system_preemption) and warns in its log. Reading it
// takes `operator { policy = "read" }`; without it (403), it warns once and
// reports "unknown".

// sysPreemptEvery is how often the scheduler configuration is read.
const sysPreemptEvery = 5 * time.Minute

// watchSystemPreemption reads Nomad's scheduler configuration until ctx
// ends.
func (c *Controller) watchSystemPreemption(ctx context.Context) {
	if c.client == nil {
		return
	}
	warned := ""
	for {
		state := "unknown"
		cfg, _, err := c.client.Operator().SchedulerGetConfiguration(nil)
		switch {
		case err != nil && isForbidden(err):
			if warned != "forbidden" {
				c.log().Warn("cannot read Nomad's scheduler configuration (the controller's policy lacks operator read): whether Nomad's system scheduler preempts allocations without a checkpoint signal is unknown", "error", err)
				warned = "forbidden"
			}
		case err != nil:
			c.log().Debug("read Nomad's scheduler configuration", "error", err)
		case cfg != nil && cfg.SchedulerConfig != nil && cfg.SchedulerConfig.PreemptionConfig.SystemSchedulerEnabled:
			state = "on"
			if warned != "on" {
				c.log().Warn("Nomad's system scheduler preemption is on: a system job of higher priority evicts other tenants' GPU work without a checkpoint signal before Steward can act; turn it off: nomad operator scheduler set-config -preempt-system-scheduler=false")
				warned = "on"
			}
		default:
			state, warned = "off", ""
		}
		c.setHealth(func(h *Health) { h.SystemPreemption = state })
		if !sleepCtx(ctx, sysPreemptEvery) {
			return
		}
	}
}
