// Package nomadmodel is one model of Nomad as Steward drives it: a cluster
// of nodes with GPUs, the job groups Nomad runs or queues and Steward
// holds, Nomad's placement of its queue, and the effect of each of the
// engine's actions (engine.Kind) on that cluster as the controller makes
// Nomad carry it out. It is pure: no I/O, no clock (every call takes the
// time), deterministic.
//
// What it models:
//   - placement (place.go): Nomad's queue by evaluation order (work the
//     controller asked ahead first, then priority, then how long it
//     waited), each allocation on the fullest node that fits it
//     (binpack), in its node pool, on a device class its request accepts
//     and on a node it is pinned to; a gang all or nothing;
//   - the actions (effect.go: Carry decides what each does, once, and a
//     State carries it out; apply.go: the model's Cluster as a State), as
//     controller/act.go makes Nomad do them: a
//     group's count lowered (hold), raised (resume), a drain that stops
//     victims now or after the checkpoint signal and grace, and then holds
//     or stops them for good; priority and node pool changes;
//   - when freed GPUs count as free: when the victims stop, not when the
//     preemption is decided (drain.go);
//   - the GPUs set aside for a beneficiary (Snapshot.Earmarks) between
//     rounds, and when they lapse, as the controller keeps them (marks.go).
//
// What it does not: Nomad's own preemption (off under Steward), CPU and
// memory, spread and affinities, evaluation timing (a round places
// everything that fits at once), allocations that fail or complete by
// themselves (a caller ends a job with Complete). Those are the callers'
// (the simulator's run times, the engine's stories, the forecast's
// draws).
//
// The contract (package contract) is the same table of cases run against
// this model, the controller over its fake Nomad
// (controller/contract_test.go), the simulator (sim/contract_test.go) and
// the forecast's replay (forecast/contract_test.go): where they disagree
// the controller is right, since it is what users run. The simulator and
// the replay keep their own state for speed, and carry plans out by Carry
// on it (their own State); they take from here the binpack choice
// (BestFit), Nomad's placement rule (Fits) and, through Carry, the
// effects of every action and their timing (StopOf, DrainTime,
// SignalDelay).
package nomadmodel
