// Command leakcheck ends `make test`: it fails, listing each one, when
// processes the run started are still running after a short grace, and
// then kills them, so that a leak does not skew what runs next on the
// machine. See internal/leakcheck for which processes count.
//
//	leakcheck -run ID -since UNIX_SECONDS [-tmpdir DIR] [-bin PATH]... [-grace 10s]
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-steward/steward/internal/leakcheck"
	"github.com/gpu-steward/steward/internal/procs"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

type binFlags []string

func (b *binFlags) String() string     { return strings.Join(*b, ",") }
func (b *binFlags) Set(v string) error { *b = append(*b, v); return nil }

func run(args []string) int {
	fs := flag.NewFlagSet("leakcheck", flag.ContinueOnError)
	id := fs.String("run", os.Getenv(leakcheck.EnvRun), "the run's "+leakcheck.EnvRun+" value")
	since := fs.String("since", "", "when the run began, in Unix seconds (default: the -run ID's first part)")
	tmpdir := fs.String("tmpdir", "", "the run's TMPDIR")
	grace := fs.Duration("grace", 10*time.Second, "how long processes may take to exit")
	var bins binFlags
	fs.Var(&bins, "bin", "a build output (file, or directory of them) the run starts processes from; repeatable")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *id == "" {
		fmt.Fprintln(os.Stderr, "leakcheck: no run ID: pass -run or set "+leakcheck.EnvRun)
		return 2
	}
	if *since == "" {
		*since, _, _ = strings.Cut(*id, ".")
	}
	secs, err := strconv.ParseInt(*since, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: -since %q: want Unix seconds\n", *since)
		return 2
	}
	r := leakcheck.Run{ID: *id, TempDir: *tmpdir, Since: time.Unix(secs, 0), Bins: bins}

	deadline := time.Now().Add(*grace)
	for {
		ps, err := procs.List()
		if err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
			return 2
		}
		r.Exclude = procs.Ancestors(ps, os.Getpid())
		r.Exclude[os.Getpid()] = true
		leaks := r.Find(ps)
		if len(leaks) == 0 {
			fmt.Printf("leakcheck: no process of this run (%s=%s) is still running\n", leakcheck.EnvRun, *id)
			return 0
		}
		if time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		fmt.Fprintf(os.Stderr, "\nleakcheck: FAIL: %d processes this run started are still running %v after its tests ended:\n%s",
			len(leaks), *grace, leakcheck.Report(leaks))
		for _, l := range leaks {
			if err := procs.Kill(l.Proc); err != nil {
				fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
			}
		}
		fmt.Fprintln(os.Stderr, "leakcheck: killed them. A test did not stop what it started: every process a test starts must end in its t.Cleanup (see internal/testnomad's Stop).")
		return 1
	}
}
