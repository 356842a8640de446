package devagent

import (
	"os"
	"time"

	"github.com/gpu-steward/steward/internal/procs"
)

// Under lists the running processes, other than this one and those skip
// picks (nil: none), whose command line, working directory or environment
// names dir: for an agent's data dir, its tasks (their cwd and NOMAD_*
// variables) and their executors (`nomad executor` names its log file in
// the alloc dir).
func Under(dir string, skip func(procs.Proc) bool) ([]procs.Proc, error) {
	ps, err := procs.List()
	if err != nil {
		return nil, err
	}
	var out []procs.Proc
	for _, p := range ps {
		if p.Pid != os.Getpid() && p.Running() && p.Mentions(dir) && (skip == nil || !skip(p)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// KillUnder kills every process under dir (see Under) until none is left,
// for up to 10 seconds, and returns those it killed. Nomad's executors run
// in sessions of their own and outlive an agent that dies without stopping
// its tasks, and the tasks with them.
func KillUnder(dir string) []procs.Proc {
	var killed []procs.Proc
	seen := map[int]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		left, err := Under(dir, nil)
		if err != nil || len(left) == 0 {
			break
		}
		for _, p := range left {
			_ = procs.Kill(p)
			if !seen[p.Pid] {
				seen[p.Pid] = true
				killed = append(killed, p)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return killed
}
