package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestControllerConfigFile (issue 34, item 3): the controller started with
// -config FILE alone (and NOMAD_ADDR), the file holding what the other
// tests give as flags: it leads, serves its endpoints where the file says,
// and preempts training for a notebook as a flag-configured one does. A
// file with a mistake stops it at start, its file:line,col on stderr.
func TestControllerConfigFile(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, "ml")
	dir := t.TempDir()
	conf := filepath.Join(dir, "steward.hcl")
	if err := os.WriteFile(conf, []byte(`policy    = ["`+writePolicy(t, benchPolicy)+`"]
id        = "from-file"
log_level = "debug"
resync    = "2s"

telemetry {
  listen = "127.0.0.1:0"
}
high_availability {
  lock_ttl   = "10s"
  lock_delay = "0s"
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := c.startControllerArgs("from-file", c.Address, "controller", "-config", conf)
	c.work("train", "ml", "training", 4, 1, "priority", "40")
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	c.work("nb", "ml", "interactive", 4, 1, "priority", "60")
	c.waitRunning(60*time.Second, map[string]int{"ml/nb": 1, "ml/train": 0})
	for _, want := range []string{"leading: this controller acts: identity=from-file", "serving /metrics and /healthz: address=127.0.0.1:"} {
		if !ctl.Contains(want) {
			t.Errorf("the controller's log lacks %q", want)
		}
	}

	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("telemetry {\n  listen = 9646\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := c.startControllerArgs("bad", c.Address, "controller", "-config", bad)
	testnomad.WaitFor(t, 20*time.Second, "the controller refusing its file", func() (bool, string) {
		return broken.Exited() && broken.Contains(bad+":2,12-16: error: Invalid listen"), tail(broken.Log(), 10)
	})
}
