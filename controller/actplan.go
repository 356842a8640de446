package controller

import (
	"context"
	"sync"

	"github.com/gpu-steward/steward/policy/engine"
)

// actInFlight is Config.ActInFlight when unset: a plan's actions for
// different jobs carried out at once. One after another, the 20–38 actions
// of a round at 250 nodes held it for 4–6 s, each a state write and a
// Nomad call or two (issue 33).
const actInFlight = 8

// actConcurrently carries out a plan's actions, width at a time, and
// returns once all are done. Each waits for the actions before it that it
// depends on (actionDeps): one job's actions stay in plan order, and a
// beneficiary's wait for the preemptions decided for it. An action not
// started when the term ends (ctx cancelled) is not carried out: the rest
// of the plan is the next leader's to decide (TestActStopsWhenTheTermEnds).
// do(ctx, i) carries out action i with the ctx it is given; results in
// plan order are the caller's to collect by i.
func actConcurrently(ctx context.Context, actions []engine.Action, width int, do func(ctx context.Context, i int)) {
	inTurns(ctx, len(actions), width, actionDeps(actions), func() bool { return ctx.Err() != nil }, do)
}

// inTurns runs do(ctx, i) for each i in [0, n), width at a time, each once
// the ones deps[i] names are done (deps name earlier ones only; nil: none
// waits), and returns once all are. Only one runs at a time apart from its
// waits on Nomad (actlock.go): do holds the act lock ctx carries. One not
// started when stop says so is left out.
func inTurns(ctx context.Context, n, width int, deps [][]int, stop func() bool, do func(ctx context.Context, i int)) {
	if width <= 1 || n <= 1 {
		for i := range n {
			if stop != nil && stop() {
				return
			}
			do(ctx, i)
		}
		return
	}
	lock := &actLock{}
	lctx := withActLock(ctx, lock)
	done := make([]chan struct{}, n)
	for i := range done {
		done[i] = make(chan struct{})
	}
	slots := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			if deps != nil {
				for _, j := range deps[i] {
					<-done[j]
				}
			}
			slots <- struct{}{}
			defer func() { <-slots }()
			lock.mu.Lock()
			defer lock.mu.Unlock()
			if stop != nil && stop() {
				return
			}
			do(lctx, i)
		}()
	}
	wg.Wait()
}

// actionDeps are, for each action, the earlier ones it waits for: the
// latest of its own job (which waited for the ones before it), the
// preemptions and stops decided for its job since (a resume after its
// victims reads whether they drain: round.beneficiaryDraining), and, for
// an action on another job's behalf, that job's latest own action. Two
// victims of one beneficiary do not wait for each other.
func actionDeps(actions []engine.Action) [][]int {
	last := map[jobKey]int{}
	forJob := map[jobKey][]int{}
	deps := make([][]int, len(actions))
	for i, a := range actions {
		k := jobKey{a.Job.Namespace, a.Job.ID}
		if j, ok := last[k]; ok {
			deps[i] = append(deps[i], j)
		}
		deps[i] = append(deps[i], forJob[k]...)
		delete(forJob, k)
		if a.For != nil {
			f := jobKey{a.For.Namespace, a.For.ID}
			if j, ok := last[f]; ok && f != k {
				deps[i] = append(deps[i], j)
			}
			if f != k {
				forJob[f] = append(forJob[f], i)
			}
		}
		last[k] = i
	}
	return deps
}
