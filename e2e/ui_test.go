package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/testnomad"
)

// Users "view via Nomad UI": this test drives a real browser (Debian's
// chromium, headless, through chromedp) against the agent's web UI after a
// preemption, and checks what a person sees there. Screenshots go to
// $STEWARD_ARTIFACTS (default e2e/artifacts/).

const uiPolicy = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
preemption {
  min_runtime       = "0s"
  grace             = "3s"
  checkpoint_signal = "SIGUSR1"
}

# These tests' namespaces have no tenant blocks: they may use every tier.
defaults {
  unnamed_tiers = ["interactive", "training"]
}
`

// TestNomadUIShowsPreemption: the trainer (steward-exec) is preempted for a
// notebook of a higher tier. In chromium: the job's Variables tab lists
// Steward's record; the record's page, once its values are revealed (they
// are masked until one clicks the eye), shows the preemption reason; the
// trainer's allocation shows the driver's "checkpoint requested" event.
func TestNomadUIShowsPreemption(t *testing.T) {
	t.Parallel()
	browser := chromiumPath(t)
	artifacts := artifactsDir(t)
	trainer := testnomad.TrainerBin(t)

	simDir, ckptRoot := t.TempDir(), t.TempDir()
	a := testnomad.Start(t, testnomad.Options{
		Plugins: []testnomad.Plugin{
			{Name: "steward-gpu", Config: fmt.Sprintf(`    backend       = "sim"
    sim_count     = 1
    sim_state_dir = %q
    stats_period  = "1s"`, simDir)},
			{Name: "steward-exec", Config: fmt.Sprintf(`    checkpoint_root   = %q
    gpu_sample_period = "1s"`, ckptRoot)},
		},
		LogLevel: "INFO",
	})
	c := &cluster{Agent: a, t: t, stateDir: simDir}
	for _, ns := range []string{"steward", "ml"} {
		if _, err := a.Client.Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	testnomad.WaitFor(t, 60*time.Second, "steward-exec healthy and a simulated GPU", func() (bool, string) {
		node := a.Node(t)
		if d := node.Drivers["steward-exec"]; d == nil || !d.Healthy {
			return false, "steward-exec not healthy yet"
		}
		return node.NodeResources != nil && len(node.NodeResources.Devices) > 0, "no devices yet"
	})
	c.startController("ctl", writePolicy(t, uiPolicy))

	// The example trainer, in namespace ml as job "train".
	src, err := os.ReadFile(filepath.Join(testnomad.RepoRoot(t), "jobs", "trainer.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	job, err := a.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Canonicalize: true,
		Variables: fmt.Sprintf("trainer_bin = %q\nsteps = 100000\nstep_time = \"200ms\"\nkill_timeout = \"5s\"\n", trainer)})
	if err != nil {
		t.Fatalf("parsing jobs/trainer.nomad.hcl: %v", err)
	}
	id, ns, prio := "train", "ml", 40
	job.ID, job.Name, job.Namespace, job.Priority = &id, &id, &ns, &prio
	if _, _, err := a.Client.Jobs().Register(job, &api.WriteOptions{Namespace: ns}); err != nil {
		t.Fatalf("registering the trainer: %v", err)
	}
	c.waitRunning(60*time.Second, map[string]int{"ml/train": 1})
	victim := c.allocIDs("ml", "train")[0]
	time.Sleep(2 * time.Second) // a checkpoint or two of its own

	c.work("notebook", "ml", "interactive", 1, 1, "priority", "60")
	rec := c.waitRecord(60*time.Second, "ml", "train", "steward_state", "preempted")
	reason := rec["steward_reason"]
	if !strings.Contains(reason, "yields 1 GPU to ml/notebook/work") {
		t.Fatalf("train's reason %q does not name the notebook", reason)
	}
	// The controller records the reason and grace before it signals, so the
	// driver's event carries them.
	c.waitTaskEvent(30*time.Second, "ml", victim, "Driver", "checkpoint requested (SIGUSR1): preemption in 3s: tier training (priority 40) yields 1")
	c.waitRunning(60*time.Second, map[string]int{"ml/notebook": 1, "ml/train": 0})

	b := newBrowser(t, browser, artifacts)

	// The job's page, Variables tab: Steward's record is listed there.
	b.open(a.Address + "/ui/jobs/train@ml/variables")
	b.waitText("nomad/jobs/train", 60*time.Second)
	b.screenshot("ui-job-variables-tab.png")

	// The record itself: keys are shown, values are masked until the eye
	// next to each is clicked.
	b.open(a.Address + "/ui/variables/var/nomad/jobs/train@ml")
	b.waitVisible(varRow("steward_reason"), 60*time.Second)
	if row := b.text(varRow("steward_reason")); !strings.Contains(row, "********") {
		t.Logf("the reason's row reads %q before any click: the UI no longer masks values?", row)
	}
	b.screenshot("ui-variable-record-masked.png")
	for _, key := range []string{"steward_state", "steward_reason", "steward_preemptions"} {
		b.click("(" + varRow(key) + "//button)[last()]") // the eye; the first is "copy"
	}
	// The record as it is now (a preempted job that keeps waiting may be
	// re-noted as held): the page must show it, and it must still say who
	// took the GPU.
	now := c.record("ml", "train")
	b.waitText(now["steward_reason"], 30*time.Second)
	if got := b.text(varRow("steward_reason") + "//code"); !strings.Contains(got, "ml/notebook/work") {
		t.Errorf("the reason shown, %q, does not name the notebook", got)
	}
	if got := b.text(varRow("steward_state") + "//code"); got != now["steward_state"] {
		t.Errorf("steward_state shows %q, want %q", got, now["steward_state"])
	}
	if got := b.text(varRow("steward_preemptions") + "//code"); got != "1" {
		t.Errorf("steward_preemptions shows %q, want 1", got)
	}
	b.screenshot("ui-variable-record.png")

	// The allocation of the preempted trainer: the driver's checkpoint
	// event, as Nomad shows task events (on the allocation's task).
	b.open(a.Address + "/ui/allocations/" + victim)
	b.waitText("train", 60*time.Second)
	b.screenshot("ui-allocation.png")
	b.open(a.Address + "/ui/allocations/" + victim + "/train")
	b.waitText("checkpoint requested (SIGUSR1)", 60*time.Second)
	b.screenshot("ui-allocation-task-events.png")
	t.Logf("screenshots in %s", artifacts)
}

// chromiumPath is $STEWARD_CHROMIUM, else /usr/bin/chromium. A missing
// browser fails the test: `make chromium` installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("STEWARD_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if info, err := os.Stat(p); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		t.Fatalf("chromium not found at %s: run `make chromium` (apt-get install chromium)", p)
	}
	return p
}

// artifactsDir is $STEWARD_ARTIFACTS, else e2e/artifacts in the repository.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STEWARD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(testnomad.RepoRoot(t), "e2e", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return dir
}

// varRow is the XPath of a variable page's row for key (the table lists
// keys in the first cell; values are masked until the row's eye is
// clicked).
func varRow(key string) string { return `//tr[td[1][normalize-space()="` + key + `"]]` }

// uiBrowser is one headless chromium tab. Selectors are XPath.
type uiBrowser struct {
	t         *testing.T
	ctx       context.Context
	artifacts string
}

func newBrowser(t *testing.T, path, artifacts string) *uiBrowser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium (%s): %v", path, err)
	}
	return &uiBrowser{t: t, ctx: ctx, artifacts: artifacts}
}

func (b *uiBrowser) run(timeout time.Duration, what string, actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.screenshot("failed-" + strings.NewReplacer(" ", "-", "/", "_", `"`, "", "[", "", "]", "", "=", "").Replace(what) + ".png")
		b.t.Fatalf("browser: %s: %v\npage text:\n%s", what, err, tail(b.bodyText(), 40))
	}
}

func (b *uiBrowser) open(url string) {
	b.t.Helper()
	b.run(60*time.Second, "open "+url, chromedp.Navigate(url))
}

func (b *uiBrowser) waitVisible(sel string, timeout time.Duration) {
	b.t.Helper()
	b.run(timeout, "wait for "+sel, chromedp.WaitVisible(sel, chromedp.BySearch))
}

func (b *uiBrowser) click(sel string) {
	b.t.Helper()
	b.run(20*time.Second, "click "+sel, chromedp.WaitVisible(sel, chromedp.BySearch), chromedp.Click(sel, chromedp.BySearch))
}

// text is the inner text of the first node matching the XPath sel, "" if
// none.
func (b *uiBrowser) text(sel string) string {
	var s string
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	_ = chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
		`((document.evaluate(%q, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue) || {}).innerText || ""`, sel), &s))
	return strings.TrimSpace(s)
}

func (b *uiBrowser) bodyText() string {
	var s string
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &s))
	return s
}

// waitText waits until the page shows want (the UI renders, then
// long-polls: there is no "loaded" moment to wait for).
func (b *uiBrowser) waitText(want string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(b.bodyText(), want) {
		if time.Now().After(deadline) {
			b.screenshot("failed-wait-text.png")
			b.t.Fatalf("browser: the page never showed %q within %v; it shows:\n%s", want, timeout, tail(b.bodyText(), 60))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// screenshot saves the whole page as a PNG in the artifacts dir.
func (b *uiBrowser) screenshot(name string) {
	b.t.Helper()
	var buf []byte
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.Sleep(300*time.Millisecond), chromedp.FullScreenshot(&buf, 100)); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.artifacts, name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Errorf("saving %s: %v", path, err)
		return
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(buf))
}
