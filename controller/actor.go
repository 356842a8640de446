package controller

import (
	"github.com/gpu-steward/steward/policy"
	"github.com/gpu-steward/steward/policy/engine"
)

// actor carries out a plan's actions and what follows from them: drains,
// moves, resumes and holds (act.go), the scale writes (scaling.go), the
// pool guard's holds (poolguard_act.go), queue moves and snoozes
// (queuemove.go, snooze.go), the earmarks of freed GPUs (earmarks.go) and
// the warnings to idle jobs' owners (idlewarn.go).
// Each action writes its intent to the job's state first (the store), then
// asks Nomad. It holds what it needs of the controller, not the controller.
type actor struct {
	*stateStore // the jobs' states, written ahead of each action

	pub     *publisher // records of what was done
	notices *outbox    // messages about what was done
	drains  *drainer   // drains in progress
	metrics *metrics
	usage   *usageStore
	// engineNow is the policy and engine in force (they change on SIGHUP);
	// remember keeps a decision for the status; crashPoint exits at a
	// step named in the environment (tests only, crash.go).
	engineNow  func() (*policy.Policy, *engine.Engine)
	remember   func(Decision)
	crashPoint func(step string)
}

func newActor(c *Controller) *actor {
	return &actor{stateStore: c.stateStore, pub: c.pub, notices: c.notices, drains: c.drains, metrics: c.metrics, usage: c.usage,
		engineNow: c.engineNow, remember: c.decisions.add, crashPoint: c.crash.point}
}
