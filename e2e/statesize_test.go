package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// maxGangState is what a 64-allocation gang's saved state may take
// (issue #14; Nomad's variable limit is 64 KiB).
const maxGangState = 4096

// TestGangStateOnRealAgent preempts a 64-allocation gang for a 64-GPU job
// and resumes it when that job stops, reading the gang's state variable
// all along: it never passes maxGangState.
func TestGangStateOnRealAgent(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 64, testnomad.Options{}, "ml")
	c.work("gang", "ml", "training", 1, 64, "priority", "40", "gang", "true")
	c.waitRunning(180*time.Second, map[string]int{"ml/gang": 64})
	ctl := c.startController("ctl", writePolicy(t, twoTiers+`
preemption {
  min_runtime = "0s"
  grace       = "5s"
}
`))

	var mu sync.Mutex
	largest, reads := 0, 0
	var biggest string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			v, _, err := c.Client.Variables().Read("steward/jobs/ml/gang", &api.QueryOptions{Namespace: "steward"})
			if err != nil {
				continue
			}
			mu.Lock()
			reads++
			if n := len(v.Items["state"]); n > largest {
				largest, biggest = n, v.Items["state"]
			}
			mu.Unlock()
		}
	}()

	c.work("big", "ml", "interactive", 64, 1, "priority", "60")
	c.waitRunning(120*time.Second, map[string]int{"ml/big": 1, "ml/gang": 0})
	if _, _, err := c.Client.Jobs().Deregister("big", false, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c.waitRunning(180*time.Second, map[string]int{"ml/big": 0, "ml/gang": 64})
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	t.Logf("the gang's state: %d bytes at most, over %d reads", largest, reads)
	if reads == 0 || largest == 0 {
		t.Fatalf("the gang's state was never read (%d reads); controller log:\n%s", reads, tail(ctl.Log(), 40))
	}
	if largest > maxGangState {
		t.Errorf("the gang's state reached %d bytes, more than %d:\n%s", largest, maxGangState, biggest)
	}
}
