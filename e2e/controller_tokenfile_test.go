package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestControllerTokenFile: with -token-file the controller takes its token
// from a file (as the controller job does with its workload identity), and
// SIGHUP re-reads it: refused with a wrong token, it leads once the file
// holds the right one. Neither token shows in its log.
func TestControllerTokenFile(t *testing.T) {
	t.Parallel()
	c := startProdCluster(t, prodSpec{gpus: []simGPUs{{count: 2}}}, "ml")
	good := c.controllerToken
	c.controllerToken = "" // no NOMAD_TOKEN: the file alone
	const wrong = "00000000-1111-2222-3333-444444444444"
	file := filepath.Join(t.TempDir(), "nomad_token")
	if err := os.WriteFile(file, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := c.startController("ctl", writePolicy(t, fmt.Sprintf(faultPolicy, "0s")), "-token-file", file)
	testnomad.WaitFor(t, 30*time.Second, "the wrong token refused", func() (bool, string) {
		return ctl.Contains("403") || ctl.Contains("ACL token not found"), tail(ctl.Log(), 5)
	})
	if ctl.Contains("leading: this controller acts") {
		t.Fatalf("the controller leads with a wrong token:\n%s", tail(ctl.Log(), 20))
	}
	if err := os.WriteFile(file, []byte(good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl.Signal(syscall.SIGHUP)
	testnomad.WaitFor(t, 60*time.Second, "the controller leads with the re-read token", func() (bool, string) {
		return ctl.Contains("leading: this controller acts"), tail(ctl.Log(), 5)
	})
	c.work("train", "ml", "training", 2, 1, "priority", "50")
	c.waitRecord(60*time.Second, "ml", "train", "steward_tier", "training")
	ctl.Stop()
	for _, tok := range []string{wrong, good} {
		if strings.Contains(ctl.Log(), tok) {
			t.Errorf("a token appears in the controller's log")
		}
	}
}
