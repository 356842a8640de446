package driver

import (
	"context"
	"strings"
)

// Idle warnings: the controller writes an idle rule's warning into the
// job's record (steward_idle_warning, _at, _allocs) warn_before before it
// would release the job's GPUs; the job's template renders them into the
// task's preemption file (idle_warning, idle_warning_at,
// idle_warning_allocs), and the driver turns each new warning about its
// allocation into one task event, which people see on the allocation in
// the Nomad UI and in `nomad alloc status`.

// eventIdleWarning is the steward.event of an idle warning; its
// annotation AnnotationIdleWarningAt holds the warning's time as the
// controller wrote it.
const (
	eventIdleWarning        = "idle-warning"
	AnnotationIdleWarningAt = "steward.idle_warning_at"
)

// idleWarning returns the event for a warning in the preemption file that
// is about this task's allocation and was not emitted before; ok is false
// otherwise. The warning's time tells one warning from the next: the
// controller gives a new one only after the job was busy again.
func (h *taskHandle) idleWarning(info preemptionInfo) (msg string, ok bool) {
	if info.IdleWarning == "" || info.IdleWarningAt == "" || !aboutAlloc(info.IdleWarningAllocs, h.cfg.AllocID) {
		return "", false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if info.IdleWarningAt == h.idleWarnedAt {
		return "", false
	}
	h.idleWarnedAt = info.IdleWarningAt
	return "Idle warning: " + info.IdleWarning, true
}

// primeIdleWarning takes the warning the file holds as emitted already:
// a recovered task's was emitted before the plugin restarted.
func (h *taskHandle) primeIdleWarning(info preemptionInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.idleWarnedAt = info.IdleWarningAt
}

// aboutAlloc reports whether a warning's allocations (short IDs, comma
// separated; none: the whole job) include the allocation.
func aboutAlloc(allocs, allocID string) bool {
	if strings.TrimSpace(allocs) == "" {
		return true
	}
	for _, a := range strings.Split(allocs, ",") {
		if a = strings.TrimSpace(a); a != "" && strings.HasPrefix(allocID, a) {
			return true
		}
	}
	return false
}

// watchIdleWarnings reads the task's preemption file every
// gpu_sample_period and emits each new idle warning about the task's
// allocation once, until ctx ends.
func (d *Driver) watchIdleWarnings(ctx context.Context, h *taskHandle) {
	everyPeriod(ctx, d.config().GPUSamplePeriod, h, "cannot read the preemption file", func() error {
		info := readPreemptionInfo(h.cfg.TaskDir().Dir, preemptionFileRel(&h.tc))
		if msg, ok := h.idleWarning(info); ok {
			h.logger.Info("idle warning", "message", msg)
			d.emit(h.cfg, msg, map[string]string{"steward.event": eventIdleWarning, AnnotationIdleWarningAt: info.IdleWarningAt})
		}
		return nil
	})
}
