// Package forecast says where each waiting job stands and when it is
// likely to start: its position in the order the engine serves waiting
// work (in the cluster and in its tenant), the rule that blocks it, what
// would unblock it, and a start-time forecast (P50, P90).
//
// The forecast replays the live snapshot forward in virtual time through
// the very engine the controller runs (policy/engine), its actions applied
// as the controller applies them and Nomad's placement modelled here
// (binpack, gangs all or nothing, free GPUs taken latest freed last) on
// Nomad's rule of which node may run what from the one model of Nomad
// (nomadmodel.Fits: node pool, device class, pinned nodes) and its drain
// timing (nomadmodel.DrainTime: the grace runs from the checkpoint signal,
// a signal delay after the plan). What each action does is the one
// model's (nomadmodel.Carry: when a drain ends, whether stopped work is
// held, what a resume waits for), carried out on the replay's own
// allocations and demands (replayNomad); its placement loop is its own (a
// replay must stay cheaper than the model's cluster), and the contract of
// the one model (nomadmodel/contract) runs against it (TestContract): each
// case ends where the controller's rounds end it. Running work ends
// after a run time drawn from its job's steward.expected_runtime, or from
// what similar jobs took (History, weighed by the runs of their kind still
// going; a job's family before its class). What a replay assumes of a
// family nobody has seen run (fewer than minSimilar runs of its own) is
// that it is one more family like those its class (or the wider view it
// borrows from) has seen: its run times are a mixture of theirs, each
// family weighing alike however many runs it has, finished or going, and a
// family none of whose runs has ended counts as longer than its oldest
// run's age (family_prior.go), not its class's runs pooled, where one
// family of many long runs decides for every new one. Work arrives as it
// arrived over the last day, per tenant and tier (Arrivals). Work placed
// at a plan starts when the GPUs it takes were freed, between plans
// (replay.go: startOf), and work a tenant's limit holds back follows the
// tenant's work that ends within a step (succession.go); the waiting jobs
// of one batch share their run time's quantile (batches.go); the work a
// job has done counts (Input.Done). Several replays with different draws
// give the spread, each replay drawing its own distribution from each
// history (bootstrap.go: the doubt a short history leaves about its
// class's run times), which Calibration then corrects with how the
// cluster's own past forecasts of the same basis did (calibrate.go:
// conformalized quantiles, apart for jobs whose run times are their
// family's own, their expected_runtime, or borrowed from other families);
// a cluster of more than Options.MaxNodes nodes is replayed a share at a
// time (reduce.go), so that every replay fits the controller's budget. It
// is pure (no I/O, no clock) and deterministic given its seed.
//
// It works on engine.Snapshot rather than on the simulator's own model
// (package sim), because the live snapshot has what the simulator's traces
// lack: node pools, device classes and their requests, groups, quotas,
// earmarks and work already draining. The simulator measures the forecast
// (sim.MeasureForecast) by calling it on the snapshots it builds.
package forecast
