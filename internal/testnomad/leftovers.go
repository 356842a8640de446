package testnomad

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// killTasksUnder kills what is left of the tasks of an agent whose data
// dir is dataDir: processes whose environment or command line names a
// path in it (tasks get NOMAD_ALLOC_DIR and NOMAD_TASK_DIR there; raw_exec's
// executors are told their alloc dir). Drivers start tasks in process
// groups of their own, so killing the agent's group does not reach them,
// and the data dir is unique to one agent, so nothing else matches. It
// returns how many it killed.
func killTasksUnder(dataDir string) int {
	if dataDir == "" {
		return 0
	}
	needle := []byte(filepath.Clean(dataDir) + string(filepath.Separator))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"environ", "cmdline"} {
			raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && bytes.Contains(raw, needle) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
				break
			}
		}
	}
	return killed
}
