package controller

// wakeup is the control loop's doorbell: a poke asks for a round soon,
// and pokes while one is pending are one. The owners that wake the loop
// (sampler, drainer, forecaster, notifier) are handed its poke, not the
// controller's.
type wakeup chan struct{}

// poke asks the loop for a round soon.
func (w wakeup) poke() {
	select {
	case w <- struct{}{}:
	default:
	}
}
