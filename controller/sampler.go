package controller

// sampler reads the GPUs' activity into the usage store (usage) every
// StatsInterval, from the operator's source: each covered node's host
// stats (sweep.go) or Prometheus (activity.go, activity_prometheus.go).
// It owns whether the source answers and which GPUs it refused; the
// rounds read what it found through the usage store, the status and
// /healthz through its warnings. Sweeps run beside the control loop.
// It is given the wiring, the usage store and metrics it writes, and a
// way to wake the loop, not the controller.
type sampler struct {
	wiring
	usage   *usageStore
	metrics *metrics
	// poke wakes the control loop (wakeup.poke).
	poke func()
	// prom is the Prometheus activity source (nil: Nomad's host
	// stats), activity whether the source answers (activity.go).
	prom     *promSource
	activity activityState
	// gpuRefused are the GPUs whose stats carry no utilisation.
	gpuRefused gpuRefusals
}
