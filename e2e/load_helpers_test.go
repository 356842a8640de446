package e2e

import (
	"context"
	"runtime"
	"testing"
)

// loadMachine keeps n CPU-bound loops busy beside the test until it ends:
// the stories whose outcome hangs on the order in which Nomad and the
// controller act (evaluations, stops, scales) are run so too, on a machine
// as busy as CI's, where a slower scheduler changes that order.
func loadMachine(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, n)
	for range n {
		go func() {
			defer func() { done <- struct{}{} }()
			x := 0
			for {
				for range 1 << 16 {
					x++
				}
				select {
				case <-ctx.Done():
					runtime.KeepAlive(x)
					return
				default:
				}
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			<-done
		}
	})
}
