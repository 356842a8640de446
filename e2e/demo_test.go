package e2e

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// TestDemo runs `steward demo` as `DEMO_EXIT=1 make demo` does (in a demo
// dir of its own, on a free port) and checks that the timeline tells the
// whole story, and that nothing it started outlives it.
func TestDemo(t *testing.T) {
	t.Parallel()
	text, line := runDemo(t, "")
	line("product/inference", "submitted", "tier inference")
	line("platform/eval", "held", "limit 2")
	line("research/train", "checkpointing", "reclaiming 1 for another tenant's job")
	line("research/train", "preempted", "tenant research holds 6 GPUs, reserve 4")
	line("research/train", "task event", "checkpoint requested (SIGUSR1)")
	line("research/train", "task event", "Checkpoint written at")
	line("product/notebook-a", "idle reclaim", "idle rule notebooks")
	line("research/train", "resumed", "resuming")
	line("research/train", "task event", "resuming after preemption 1")
	line("research/train", "preempted", "for another tenant's job")
	line("research/train", "task event", "resuming after preemption 2")
	for _, want := range []string{"==> bin/steward status", "Recent Decisions", "DEMO_EXIT set: stopping after"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	// platform/eval is still held for its limit at the end: the queue
	// lists it, first in the cluster and in its tenant.
	if _, queue, ok := strings.Cut(text, "==> bin/steward queue\n"); !ok {
		t.Errorf("the demo's output lacks steward queue")
	} else if !regexp.MustCompile(`(?m)^platform/eval +platform +training +\d+ +1 \(1\) +3 `).MatchString(queue) {
		t.Errorf("steward queue lacks platform/eval first in the cluster, waiting for 3 GPUs:\n%s", queue)
	}
	// and steward status shows it in full, with what would unblock it.
	if _, job, ok := strings.Cut(text, "==> bin/steward status -namespace platform eval\n"); !ok || !strings.Contains(job, "Would Unblock It") {
		t.Errorf("the demo's output lacks platform/eval's status with what would unblock it")
	}
}

// TestDemoFleet runs `DEMO=fleet DEMO_EXIT=1 steward demo`: two client
// nodes, two GPU models in two node pools. The timeline shows a pool
// precedence moving training to the cloud, a reserve within the H100 pool
// taking H100s back (naming the model), and the preempted job moving on.
func TestDemoFleet(t *testing.T) {
	t.Parallel()
	text, line := runDemo(t, "fleet")
	line("research/tune", "moved", "no room in node pool onprem for 2 GPUs on one node; node pool cloud")
	line("product/batch-b", "checkpointing", "tenant product holds 4 GPUs in pool h100, reserve 0 there: reclaiming 2 Simulated H100 GPUs on node")
	// (The timeline reads job records, which name another namespace's
	// job only as another tenant's.)
	line("product/batch-b", "preempted", "for another tenant's job (tenant research holds 0 in pool h100, reserve 2 there)")
	line("research/finetune", "running", "1 allocation running, 1 GPU")
	line("product/batch-b", "moved", "node pool cloud, next in its pool precedence (onprem, cloud), has room: moving there")
	if regexp.MustCompile(`research/(a-train|tune) +(checkpointing|preempted)`).MatchString(text) {
		t.Errorf("research's A100 work was preempted for an H100 waiter:\n%s", text)
	}
	if !strings.Contains(text, "DEMO_EXIT set: stopping after") {
		t.Errorf("the demo's output lacks its end")
	}
}

// TestDockerDemo runs `DEMO=docker DEMO_EXIT=1 steward demo`: the main
// story with research's trainer (jobs/train-docker.nomad.hcl) and the
// notebooks (jobs/notebook-docker.nomad.hcl) in containers, in a Docker
// daemon of the demo's own with Steward's images built FROM scratch. The
// trainer keeps the checkpoint contract in its container: it checkpoints
// on the signal, says so in its task dir, and resumes twice from its
// checkpoint on the tenant's host volume, told so by its template; the
// idle notebook is reclaimed, the snoozed one is not; the daemon is
// stopped and its data root removed at the end.
func TestDockerDemo(t *testing.T) {
	t.Parallel()
	text, line := runDemo(t, "docker")
	line("research/explore", "submitted", "driver docker (steward/shell:local, no network)")
	line("research/explore", "snoozed", "idle reclaim snoozed until")
	line("research/train", "submitted", "driver docker (steward/trainer:local, no network)")
	line("research/train", "task output", "STEWARD_RESUMED=0 STEWARD_RESUME_COUNT=0")
	line("platform/eval", "held", "limit 2")
	line("research/train", "checkpointing", "reclaiming 1 for another tenant's job")
	line("research/train", "preempted", "tenant research holds 6 GPUs, reserve 4")
	line("research/train", "task output", "(SIGUSR1 received)")
	line("research/train", "task output", "trainer: checkpoint written at")
	line("product/notebook-a", "submitted", "driver docker (steward/shell:local, no network)")
	line("product/notebook-a", "idle reclaim", "idle rule notebooks")
	line("research/train", "resumed", "resuming")
	line("research/train", "task output", "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=1")
	line("research/train", "task output", "resuming from checkpoint at step")
	line("research/train", "preempted", "for another tenant's job")
	line("research/train", "task output", "STEWARD_RESUMED=1 STEWARD_RESUME_COUNT=2")
	// Each resumed run starts from the step its predecessor checkpointed
	// at, on the tenant's volume: nothing lost beyond the checkpoint.
	resumes := regexp.MustCompile(`trainer: resuming from checkpoint at step (\d+) .*lost (\d+) steps`).FindAllStringSubmatch(text, -1)
	if len(resumes) != 2 {
		t.Errorf("the trainer resumed from a checkpoint %d times, want 2:\n%s", len(resumes), text)
	}
	for _, m := range resumes {
		if m[1] == "0" || m[2] != "0" {
			t.Errorf("the trainer resumed at step %s, losing %s steps: want a later step and none lost", m[1], m[2])
		}
	}
	if regexp.MustCompile(`research/explore +idle reclaim`).MatchString(text) {
		t.Errorf("research's snoozed notebook was reclaimed:\n%s", text)
	}
	for _, want := range []string{"==> Docker is up at unix://", "==> stopped the Docker daemon and removed its data root",
		"==> bin/steward status", "DEMO_EXIT set: stopping after"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
}

// runDemo runs `steward demo` (scenario "", "fleet" or "docker") to its end, checks
// that nothing it started outlives it, and returns its output and a check
// of its timeline lines.
func runDemo(t *testing.T, scenario string) (string, func(job, label, contains string)) {
	t.Helper()
	root := testnomad.RepoRoot(t)
	dir := filepath.Join(t.TempDir(), "demo")
	// The demo's tasks run with uids of their jobs' own (steward-exec's default), which must
	// pass through t.TempDir's 0700 parent.
	if err := os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o711); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	started := time.Now()
	cmd := exec.Command(testnomad.StewardBin(t), "demo", "-exit", "-root", root, "-dir", dir, "-port", strconv.Itoa(port),
		"-nomad", testnomad.NomadBin(t), "-plugin-dir", testnomad.PluginDir(t), "-trainer", testnomad.TrainerBin(t),
		"-scenario", scenario)
	var out demoOutput
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "DEMO_EXIT=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	// The demo stops what it started when it ends well (checked below);
	// when it does not (the test fails or times out, the demo crashes),
	// this stops it, then its agent, controller, executors and tasks: all
	// name the demo dir (the agent's -data-dir, the controller's -id, the
	// tasks' cwd).
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if killed := devagent.KillUnder(dir); len(killed) > 0 {
			t.Logf("killed %d processes the demo left running under %s:", len(killed), dir)
			for _, p := range killed {
				t.Logf("  pid %d: %s", p.Pid, p.CommandLine())
			}
		}
		devagent.UnmountUnder(dir)
	})
	select {
	case <-exited:
	case <-time.After(6 * time.Minute):
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		t.Errorf("the demo took more than 6 minutes")
	}
	err = waitErr
	text := out.String()
	if dir := os.Getenv("STEWARD_ARTIFACTS"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "demo-timeline"+map[bool]string{true: "-" + scenario}[scenario != ""]+".txt"), []byte(text), 0o644)
	}
	if err != nil {
		t.Fatalf("steward demo: %v\n%s", err, text)
	}
	t.Logf("DEMO_EXIT=1 steward demo took %v", time.Since(started).Round(time.Second))

	// The demo moves to another port when the one picked above was taken
	// in between (by a parallel test's agent): its links name the port it
	// says it started the agent on.
	if m := regexp.MustCompile(`starting a Nomad dev agent on http://127\.0\.0\.1:(\d+)`).FindStringSubmatch(text); m != nil {
		port, _ = strconv.Atoi(m[1])
	}
	// Timeline lines: "15:04:05  ns/job  label  text  → URL".
	line := func(job, label, contains string) {
		t.Helper()
		re := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d  ` + regexp.QuoteMeta(job) + ` +` + regexp.QuoteMeta(label) + ` .*` +
			regexp.QuoteMeta(contains) + `.*→ http://127\.0\.0\.1:` + strconv.Itoa(port) + `/ui/`)
		if !re.MatchString(text) {
			t.Errorf("no %q line for %s mentioning %q in the timeline:\n%s", label, job, contains, text)
		}
	}
	// Clean-up: no process of its own left, no runtime bits in its dir.
	for _, bit := range []string{"data", "data-cloud", "agent.pid", "cloud.pid", "controller.pid", "checkpoints"} {
		if _, err := os.Stat(filepath.Join(dir, bit)); err == nil {
			t.Errorf("%s left in the demo dir", bit)
		}
	}
	// The docker scenario's daemon: its data and exec roots, and every
	// process that names them (dockerd, containerd, the shims).
	if _, err := os.Stat(filepath.Join(dir, "dockerd.dir")); err == nil {
		t.Errorf("dockerd.dir left in the demo dir")
	}
	if m := regexp.MustCompile(`Docker is up at unix://(/\S+)/docker\.sock`).FindStringSubmatch(text); m != nil {
		if _, err := os.Stat(m[1]); err == nil {
			t.Errorf("the demo's Docker daemon's roots %s were not removed", m[1])
		}
		if left, _ := devagent.Under(m[1], nil); len(left) > 0 {
			for _, p := range left {
				t.Errorf("process %d of the demo's Docker daemon outlived the demo: %s", p.Pid, p.CommandLine())
			}
			devagent.KillUnder(m[1])
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			t.Errorf("process %s outlived the demo: %s", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	return text, line
}

// demoOutput is a bytes.Buffer safe for the process's two writers.
type demoOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *demoOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *demoOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
