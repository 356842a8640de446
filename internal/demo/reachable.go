package demo

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkReachableByTasks fails when the demo runs as root and a path the
// demo's tasks use (their alloc dirs, checkpoints, the trainer) sits
// below a directory other users cannot pass through: steward-exec runs
// tasks as nobody by default, as it should on a shared client, and those
// tasks could not start. Run as another user, the agent runs tasks as
// that user and nothing needs checking.
func checkReachableByTasks(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
			info, err := os.Stat(dir)
			if err != nil {
				return err
			}
			if info.Mode().Perm()&0o001 == 0 {
				return fmt.Errorf("steward-exec runs the demo's tasks as nobody, who cannot reach %s: %s has mode %#o "+
					"(chmod o+x %s, use -dir elsewhere, or run the demo as an unprivileged user)", p, dir, info.Mode().Perm(), dir)
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	return nil
}
