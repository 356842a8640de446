// Package devagent holds what the test harness (internal/testnomad) and
// make demo (internal/demo) both need to run a Nomad dev agent as a child
// process and clean up after it.
package devagent

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/gpu-steward/steward/internal/procs"
)

// Env is this process's environment without NOMAD_* variables, for the
// agent: an operator's NOMAD_ADDR or NOMAD_TOKEN must not leak into it.
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") {
			env = append(env, kv)
		}
	}
	return env
}

// UnmountUnder detaches every mount below dir, deepest first. Task secrets
// dirs are tmpfs mounts that can outlive a dev agent's shutdown and would
// keep its data dir from being removed.
func UnmountUnder(dir string) {
	points, err := procs.MountPoints()
	if err != nil {
		return
	}
	var mounts []string
	for _, m := range points {
		if strings.HasPrefix(m, dir+string(filepath.Separator)) {
			mounts = append(mounts, m)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}
