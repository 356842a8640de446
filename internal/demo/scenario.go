package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/internal/devagent"
)

// The scenario, on one node with 8 simulated GPUs and jobs/demo-policy.hcl
// (product reserves 4 and may hold 8, research reserves 4 and may hold 6,
// platform reserves none and may hold 2):
//
//  1. product serves a model (inference, 2 GPUs, never preempted); research
//     fine-tunes (4 GPUs), explores in a notebook (1 GPU) and runs the
//     example trainer (steward-exec, 1 GPU): 8 of 8 GPUs in use, research
//     borrows 2 beyond its reserve.
//  2. platform asks for 3 GPUs: held, over its limit of 2.
//  3. product opens notebook-a: product is under its reserve, so research
//     gives a borrowed GPU back: the trainer, started last, gets its
//     checkpoint signal and 10 s of grace, and is held.
//  4. notebook-a works for 15 s, then sits at 2%: after 30 s idle, with the
//     trainer waiting, the idle rule stops it and the trainer resumes from
//     its checkpoint.
//  5. product scales its serving up (inference-b, 1 GPU): inference never
//     waits; research is over its reserve again and gives the trainer back.
//  6. inference-b ends: the trainer resumes by itself, a second time.
//
// DEMO=docker plays it with the trainer and the notebooks in containers
// (docker.go): notebook-a reports no activity there, so it is idle from
// its start, and research snoozes the idle rule for explore.
const demoGrace = "10s"

// scenario plays the story; it returns an error listing what did not
// happen as scripted (the timeline shows what did).
func (d *demo) scenario(ctx context.Context) error {
	d.grace = demoGrace
	sc := &script{d: d, ctx: ctx}
	wait, pause, step, submit := sc.wait, sc.pause, sc.step, sc.submit

	d.printf("\n==> scenario (about 2 minutes): 8 GPUs; tenants product (reserve 4, limit 8), research (reserve 4, limit 6), platform (reserve 0, limit 2)\n")
	docker := d.cfg.Scenario == ScenarioDocker
	if docker {
		d.printf("    in containers (Nomad's docker driver, no network): research's trainer (jobs/train-docker.nomad.hcl) and the notebooks (jobs/notebook-docker.nomad.hcl)\n")
	}

	step("product serves a model; research fine-tunes, explores in a notebook and trains: 8 of 8 GPUs in use, research borrows 2")
	inference := jobRef{"product", "inference", 2}
	finetune := jobRef{"research", "finetune", 4}
	explore := jobRef{"research", "explore", 1}
	train := jobRef{"research", "train", 1}
	submit(func() error { return d.work(inference, "inference", 1, "busy_percent", "70") })
	submit(func() error { return d.work(finetune, "training", 1) })
	if docker {
		submit(func() error { return d.notebookDocker(explore) })
	} else {
		submit(func() error { return d.work(explore, "interactive", 1, "busy_percent", "40") })
	}
	wait(60*time.Second, "product/inference, research/finetune and research/explore running", func() bool {
		return d.running(inference) == 1 && d.running(finetune) == 1 && d.running(explore) == 1
	})
	if docker {
		// A container reports no activity on these simulated GPUs (docker.go):
		// research keeps its notebook from the idle rule.
		submit(func() error { return d.snooze(explore, "1h") })
	}
	pause(1100 * time.Millisecond) // the trainer starts last: the first to give a borrowed GPU back
	if docker {
		submit(func() error { return d.trainerDocker(train) })
	} else {
		submit(func() error { return d.trainer(train) })
	}
	wait(60*time.Second, "research/train running", func() bool { return d.running(train) == 1 })
	pause(4 * time.Second) // a few checkpoints of its own

	step("platform asks for 3 GPUs: more than its limit of 2")
	eval := jobRef{"platform", "eval", 3}
	submit(func() error { return d.work(eval, "training", 1) })
	wait(30*time.Second, "platform/eval held", func() bool { return d.state(eval) == "held" })

	step("product opens a notebook: product holds 2 of its reserve of 4, research borrows: research gives one back")
	nbA := jobRef{"product", "notebook-a", 1}
	if docker {
		submit(func() error { return d.notebookDocker(nbA) })
	} else {
		submit(func() error { return d.work(nbA, "interactive", 1, "busy_seconds", "15", "idle_percent", "2") })
	}
	wait(60*time.Second, "research/train preempted", func() bool { return d.w.count("preempted") > 0 })
	wait(60*time.Second, "product/notebook-a running", func() bool { return d.running(nbA) == 1 })

	if docker {
		step("notebook-a sits idle (0% GPU) while the trainer waits: the idle rule takes the GPU after 30s")
	} else {
		step("notebook-a works for 15s, then sits at 2% GPU while the trainer waits: the idle rule takes the GPU after 30s")
	}
	wait(120*time.Second, "product/notebook-a stopped as idle", func() bool { return d.w.count("idle reclaim") > 0 })
	wait(60*time.Second, "research/train resumed", func() bool { return d.running(train) == 1 })
	pause(4 * time.Second)

	step("product scales its serving up: inference never waits, research gives its borrowed GPU back again")
	infB := jobRef{"product", "inference-b", 1}
	preempted := d.w.count("preempted")
	submit(func() error { return d.work(infB, "inference", 1, "busy_percent", "70") })
	wait(60*time.Second, "product/inference-b running", func() bool { return d.running(infB) == 1 })
	wait(30*time.Second, "a second preemption", func() bool { return d.w.count("preempted") > preempted })
	pause(4 * time.Second)

	step("the extra serving ends: the held trainer resumes by itself from its checkpoint")
	resumed := d.w.count("resumed")
	if ctx.Err() == nil {
		d.finish(infB)
	}
	wait(60*time.Second, "research/train resumed again", func() bool { return d.w.count("resumed") > resumed && d.running(train) == 1 })
	pause(3 * time.Second)

	return sc.end("preempted", "held", "resumed", "idle reclaim")
}

// script is what a scenario's steps share: the demo, its context, what did
// not happen as scripted, and the first submission that failed.
type script struct {
	d      *demo
	ctx    context.Context
	missed []string
	err    error
}

// wait waits until cond holds, at most timeout; past it, it says so, notes
// what is missing and goes on.
func (sc *script) wait(timeout time.Duration, what string, cond func() bool) {
	if sc.ctx.Err() != nil {
		return
	}
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			sc.d.printf("          (still waiting after %v for %s: going on)\n", timeout, what)
			sc.missed = append(sc.missed, what)
			return
		}
		select {
		case <-sc.ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (sc *script) pause(dur time.Duration) {
	select {
	case <-sc.ctx.Done():
	case <-time.After(dur):
	}
}

// step prints a step's heading.
func (sc *script) step(text string) {
	if sc.ctx.Err() == nil {
		sc.d.printf("\n%s  ── %s\n", time.Now().Format("15:04:05"), text)
	}
}

// submit runs f unless the demo is over or a submission failed.
func (sc *script) submit(f func() error) {
	if sc.ctx.Err() == nil && sc.err == nil {
		sc.err = f()
	}
}

// end says how the scenario went: its first failed submission, or what it
// did not see, each of labels at least once in the timeline included.
func (sc *script) end(labels ...string) error {
	if sc.err != nil {
		return sc.err
	}
	if sc.ctx.Err() != nil {
		return sc.ctx.Err()
	}
	for _, label := range labels {
		if sc.d.w.count(label) == 0 {
			sc.missed = append(sc.missed, "a "+label+" line")
		}
	}
	if len(sc.missed) > 0 {
		return errors.New("did not see: " + strings.Join(sc.missed, "; "))
	}
	return nil
}

// work registers jobs/gpu-work.nomad.hcl as job j of the tier, with count
// allocations of j.GPUsPerTask GPUs each.
func (d *demo) work(j jobRef, tier string, count int, extra ...string) error {
	vars := map[string]string{"name": j.ID, "namespace": j.NS, "tier": tier,
		"gpus": fmt.Sprint(j.GPUsPerTask), "count": fmt.Sprint(count), "priority": fmt.Sprint(tierPriority[tier])}
	for i := 0; i+1 < len(extra); i += 2 {
		vars[extra[i]] = extra[i+1]
	}
	job, err := d.parse("gpu-work.nomad.hcl", vars)
	if err != nil {
		return err
	}
	return d.register(j, job, fmt.Sprintf("%s × %s, tier %s (jobs/gpu-work.nomad.hcl)", plural(count, "allocation"), plural(j.GPUsPerTask, "GPU"), tier))
}

// trainer registers jobs/trainer.nomad.hcl (the steward-exec driver and
// the example trainer) as job j.
func (d *demo) trainer(j jobRef) error {
	job, err := d.parse("trainer.nomad.hcl", map[string]string{
		"trainer_bin": d.cfg.TrainerBin, "steps": "100000", "step_time": "200ms",
		"checkpoint_every": "10", "kill_timeout": "5s",
	})
	if err != nil {
		return err
	}
	job.ID, job.Name, job.Namespace = &j.ID, &j.ID, &j.NS
	prio := tierPriority["training"]
	job.Priority = &prio
	return d.register(j, job, "1 allocation × 1 GPU, tier training, driver steward-exec: checkpoints every 10 steps (jobs/trainer.nomad.hcl)")
}

// tierPriority is jobs/demo-policy.hcl's: jobs are submitted with their
// tier's priority (Steward would set it anyway).
var tierPriority = map[string]int{"inference": 90, "build": 80, "interactive": 60, "training": 40}

func (d *demo) parse(file string, vars map[string]string) (*api.Job, error) {
	src, err := os.ReadFile(filepath.Join(d.cfg.JobsDir, file))
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for k, v := range vars {
		fmt.Fprintf(&b, "%s = %q\n", k, v)
	}
	job, err := d.client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: b.String(), Canonicalize: true})
	if err != nil {
		return nil, fmt.Errorf("parsing jobs/%s: %w", file, err)
	}
	return job, nil
}

func (d *demo) register(j jobRef, job *api.Job, what string) error {
	if _, _, err := d.client.Jobs().Register(job, &api.WriteOptions{Namespace: j.NS}); err != nil {
		return fmt.Errorf("registering %s: %w", j, err)
	}
	d.w.add(j)
	d.w.emit(j.String(), "submitted", what, d.jobURL(j.NS, j.ID))
	return nil
}

// finish stops a job, as its owner would.
func (d *demo) finish(j jobRef) {
	if _, _, err := d.client.Jobs().Deregister(j.ID, false, &api.WriteOptions{Namespace: j.NS}); err != nil {
		d.printf("(stopping %s: %v)\n", j, err)
		return
	}
	d.w.emit(j.String(), "finished", "stopped by its owner", d.jobURL(j.NS, j.ID))
}

func (d *demo) running(j jobRef) int {
	allocs, _, err := d.client.Jobs().Allocations(j.ID, false, &api.QueryOptions{Namespace: j.NS})
	if err != nil {
		return -1
	}
	n := 0
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
			n++
		}
	}
	return n
}

func (d *demo) recordItem(j jobRef, key string) string {
	v, _, err := d.client.Variables().Read("nomad/jobs/"+j.ID, &api.QueryOptions{Namespace: j.NS})
	if err != nil || v == nil {
		return ""
	}
	return v.Items[key]
}

func (d *demo) state(j jobRef) string { return d.recordItem(j, "steward_state") }

func runCmd(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = devagent.Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}
