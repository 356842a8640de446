package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/devagent"
	"github.com/gpu-steward/steward/internal/testnomad"
)

// Users pause, resume and snooze their own work from the Nomad UI: the
// example jobspec's actions (jobs/gpu-work.nomad.hcl with steward_bin set)
// clicked in chromium by a team member signed in with the team's token, on
// an agent with ACLs on. The actions act with the control task's workload
// identity and acl/steward-user.policy.hcl bound to the job, never the
// user's token or an operator's.

const uiActionsPolicy = `
tier "interactive" {
  priority    = 60
  preemptible = true
}
tier "training" {
  priority    = 40
  preemptible = true
}
idle "notebooks" {
  tiers      = ["interactive"]
  threshold  = 10
  after      = "5s"
  mode       = "pressure"
  max_snooze = "1h"
}
preemption {
  min_runtime       = "0s"
  grace             = "2s"
  checkpoint_signal = "SIGUSR1"
}

# These tests' namespaces have no tenant blocks: they may use every tier.
defaults {
  unnamed_tiers = ["interactive", "training"]
}
`

// TestNomadUIActions: team ml's notebook (1 GPU, idle from the start)
// carries the actions. In chromium, from the job's Actions menu: "pause"
// → the controller holds the notebook; "resume" → it runs again;
// "keep-my-notebook" → its record says the idle rule is snoozed, and a
// training job that then waits for the only GPU does not get it while the
// snooze lasts (the idle rule would give it at once otherwise: ending the
// snooze from the CLI does).
func TestNomadUIActions(t *testing.T) {
	t.Parallel()
	browser := chromiumPath(t)
	artifacts := artifactsDir(t)
	c := actionsCluster(t)
	// The team's own policy, the shipped user policy, and what Nomad asks
	// of anyone who runs a command in a raw_exec task (the control task's
	// driver here): alloc-node-exec in the team's namespace. With the exec
	// driver (filesystem isolation), alloc-exec, which "write" has, is
	// enough.
	teamTok := c.aclToken("team-ml", fmt.Sprintf(teamRules, "ml"), userACL(t, "ml"),
		`namespace "ml" { capabilities = ["alloc-node-exec"] }`)
	team := c.as(teamTok)

	// The team submits its notebook with the actions.
	job := c.parseJobFile(filepath.Join(testnomad.RepoRoot(t), "jobs", "gpu-work.nomad.hcl"), map[string]string{
		"name": "nb", "namespace": "ml", "tier": "interactive", "gpus": "1", "busy_seconds": "0",
		"steward_bin": testnomad.StewardBin(t), "snooze": "30m"})
	if _, _, err := team.Jobs().Register(job, &api.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatalf("team ml registers its notebook: %v", err)
	}
	c.waitGroups(60*time.Second, "ml", "nb", map[string]int{"work": 1, "steward": 1})
	ctl := c.startController("ctl", writePolicy(t, uiActionsPolicy), "-listen", "127.0.0.1:0")
	c.rounds(ctl, 1)

	b := newBrowser(t, browser, artifacts)
	b.signIn(c.Address, teamTok)

	// Until the operator binds the user policy to the job, the action has
	// only the workload identity's implicit rights: the user's own token,
	// which could leave the request, is not what acts.
	b.runAction(c.Address+"/ui/jobs/nb@ml", "pause", "needs write on variables steward/requests/* in namespace ml", "")
	b.screenshot("ui-action-unbound.png")
	c.rounds(ctl, 2)
	if rec := c.record("ml", "nb"); rec["steward_state"] == "paused" {
		t.Fatalf("paused without the policy bound to the job: %v", rec)
	}
	if _, err := c.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "steward-user-ml-nb", Rules: userACL(t, "ml"),
		JobACL: &api.JobACL{Namespace: "ml", JobID: "nb"}}, nil); err != nil {
		t.Fatalf("binding the user policy to ml/nb: %v", err)
	}

	// Pause: the controller holds the notebook's GPU group; the control
	// group runs on.
	b.runAction(c.Address+"/ui/jobs/nb@ml", "pause", "pause of ml/nb requested", "ui-actions-menu.png")
	b.screenshot("ui-action-pause.png")
	c.waitRecord(60*time.Second, "ml", "nb", "steward_state", "paused")
	c.waitGroups(60*time.Second, "ml", "nb", map[string]int{"work": 0, "steward": 1})
	if rec := c.record("ml", "nb"); !strings.Contains(rec["steward_reason"], "paused by a request in namespace ml") {
		t.Errorf("the paused record's reason %q does not say who paused it", rec["steward_reason"])
	}

	// Resume: it runs again.
	b.runAction(c.Address+"/ui/jobs/nb@ml", "resume", "resume of ml/nb requested", "")
	b.screenshot("ui-action-resume.png")
	c.waitGroups(60*time.Second, "ml", "nb", map[string]int{"work": 1, "steward": 1})

	// Keep my notebook: the record says until when; the command waits for
	// it and prints it in the action's output.
	b.runAction(c.Address+"/ui/jobs/nb@ml", "keep-my-notebook", "idle reclaim snoozed until", "")
	b.viewShot("ui-action-keep-my-notebook.png")
	rec := c.waitRecord(30*time.Second, "ml", "nb", "steward_snooze", "idle reclaim snoozed until")
	if want := "by a request in namespace ml (asked for 30m; idle rule notebooks allows up to 1h)"; !strings.Contains(rec["steward_snooze"], want) {
		t.Errorf("steward_snooze %q, want it to say %q", rec["steward_snooze"], want)
	}

	// The notebook idles (2%) past its rule's 5s while training waits for
	// the only GPU: snoozed, it keeps it.
	c.work("train", "ml", "training", 1, 1, "priority", "40")
	c.rounds(ctl, 8)
	if nb, train := c.groupsRunning("ml", "nb"), c.groupsRunning("ml", "train"); nb["work"] != 1 || train["work"] != 0 {
		t.Fatalf("the snoozed notebook runs %v and the training job %v: want the notebook's GPU group still running", nb, train)
	}
	if ctl.Contains("idle-stop") {
		t.Errorf("the controller decided an idle stop while the notebook was snoozed:\n%s", tail(ctl.Log(), 40))
	}
	// The record in the UI, as the team sees it.
	b.open(c.Address + "/ui/variables/var/nomad/jobs/nb@ml")
	b.waitVisible(varRow("steward_snooze"), 60*time.Second)
	b.click("(" + varRow("steward_snooze") + "//button)[last()]")
	b.waitText("idle reclaim snoozed until", 30*time.Second)
	b.screenshot("ui-record-snoozed.png")

	// Ending the snooze (the team's own token, from the CLI) lets the idle
	// rule give the GPU to the training job at once.
	cmd := exec.Command(testnomad.StewardBin(t), "snooze", "-namespace", "ml", "nb", "0s")
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Address, "NOMAD_TOKEN="+teamTok)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("steward snooze -namespace ml nb 0s: %v\n%s", err, out)
	}
	c.waitGroups(60*time.Second, "ml", "train", map[string]int{"work": 1})
	c.waitRecord(30*time.Second, "ml", "nb", "steward_reason", "idle rule notebooks")
	t.Logf("screenshots in %s", artifacts)
}

// actionsCluster is an agent with ACLs on (the controller with the shipped
// policy, as secureCluster) and 1 simulated GPU, whose allocations live
// under a short directory: a task's API socket (secrets/api.sock, what the
// actions talk to Nomad through) must have a path of at most 107 bytes,
// and t.TempDir's are too long for it.
func actionsCluster(t *testing.T) *cluster {
	t.Helper()
	allocDir, err := os.MkdirTemp("/tmp", "sa-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the agent starts, so run after it stopped.
	t.Cleanup(func() {
		devagent.KillUnder(allocDir)
		devagent.UnmountUnder(allocDir)
		_ = os.RemoveAll(allocDir)
	})
	const mgmt = "5a6b7c8d-1e2f-4a3b-8c9d-0e1f2a3b4c5d"
	c := startClusterWith(t, 1, testnomad.Options{ACLBootstrapToken: mgmt, ClientConfig: fmt.Sprintf("alloc_dir = %q", allocDir)}, "ml")
	c.controllerToken = c.aclToken("steward-controller", shippedACL(t, "steward-controller.policy.hcl"))
	return c
}

// parseJobFile parses a jobspec with variables, as the operator's client.
func (c *cluster) parseJobFile(path string, vars map[string]string) *api.Job {
	c.t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	var lines strings.Builder
	for k, v := range vars {
		fmt.Fprintf(&lines, "%s = %q\n", k, v)
	}
	job, err := c.Client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: lines.String(), Canonicalize: true})
	if err != nil {
		c.t.Fatalf("parsing %s: %v", path, err)
	}
	return job
}

// groupsRunning counts a job's running allocations per group.
func (c *cluster) groupsRunning(ns, job string) map[string]int {
	allocs, _, err := c.Client.Jobs().Allocations(job, false, &api.QueryOptions{Namespace: ns})
	if err != nil {
		return nil
	}
	n := map[string]int{}
	for _, a := range allocs {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			n[a.TaskGroup]++
		}
	}
	return n
}

// waitGroups waits until each group of the job runs exactly so many
// allocations.
func (c *cluster) waitGroups(timeout time.Duration, ns, job string, want map[string]int) {
	c.t.Helper()
	testnomad.WaitFor(c.t, timeout, fmt.Sprintf("%s/%s running %v", ns, job, want), func() (bool, string) {
		got := c.groupsRunning(ns, job)
		for g, n := range want {
			if got[g] != n {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
}

// signIn signs in to the UI with a token's secret, as a person does on
// the Sign In page (signing the anonymous token out first: the page shows
// its profile, not the form).
func (b *uiBrowser) signIn(address, secret string) {
	b.t.Helper()
	b.open(address + "/ui/settings/tokens")
	signOut, input := `//button[normalize-space()="Sign Out"]`, `//input[@id="token-input"]`
	deadline := time.Now().Add(60 * time.Second)
	for !b.exists(input) {
		if b.exists(signOut) {
			b.click(signOut)
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the Sign In page shows no token input:\n%s", tail(b.bodyText(), 40))
		}
		time.Sleep(300 * time.Millisecond)
	}
	b.run(20*time.Second, "type the secret", chromedp.WaitVisible(input, chromedp.BySearch),
		chromedp.SendKeys(input, secret, chromedp.BySearch))
	b.click(`//button[normalize-space()="Sign in with secret"]`)
	b.waitText("Token Authenticated!", 30*time.Second)
	b.screenshot("ui-signed-in.png")
}

// viewShot saves what the window shows (not the whole page, as
// screenshot does) as a PNG in the artifacts dir: menus and the actions'
// output beside the page, for docs/users.md.
func (b *uiBrowser) viewShot(name string) {
	b.t.Helper()
	var buf []byte
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.Sleep(300*time.Millisecond), chromedp.CaptureScreenshot(&buf)); err != nil {
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

// exists reports whether the XPath sel matches a node now.
func (b *uiBrowser) exists(sel string) bool {
	var ok bool
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	_ = chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
		`document.evaluate(%q, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue !== null`, sel), &ok))
	return ok
}

// runAction opens a job's page, opens its Actions menu (screenshot menuShot
// unless ""), runs the action and waits for its output to show want.
func (b *uiBrowser) runAction(jobURL, action, want, menuShot string) {
	b.t.Helper()
	b.open(jobURL)
	toggle := `//button[contains(@class,"action-toggle-button")]`
	b.click(toggle)
	item := `//div[contains(@class,"actions-dropdown")]//*[(self::button or self::a) and normalize-space()="` + action + `"]`
	b.waitVisible(item, 30*time.Second)
	if menuShot != "" {
		b.viewShot(menuShot)
	}
	b.click(item)
	b.waitText(want, 60*time.Second)
}
