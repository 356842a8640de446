package controller

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/policy/engine"
)

func (f *fakeNomad) StatAllocFile(ctx context.Context, ns, allocID, path string) (*api.AllocFileInfo, error) {
	f.mu.Lock()
	hook := f.statHook
	f.stats++
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, allocID, path); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[allocID+":"+path], nil
}

// signalledDrain is a preemption of ml/train's a1 whose signal went out at
// signaled.
func signalledDrain(signaled time.Time, sent bool) *Drain {
	return &Drain{Group: "work", Allocs: []string{"a1"}, Signal: "SIGUSR1", Grace: 2 * time.Minute,
		Decided: signaled.Add(-signalDelay), Signaled: signaled, Deadline: signaled.Add(2 * time.Minute), Sent: sent,
		Requeue: true, Kind: string(engine.Preempt), For: "ml/nb", Rule: "priority", Reason: "for ml/nb"}
}

// TestWrittenTargets: only the signalled tasks of victims Nomad still runs,
// in drains whose signal reached Nomad and that are not finished, are read.
func TestWrittenTargets(t *testing.T) {
	sidecar := job("ml", "train", "training", 40, 1, 1)
	g := sidecar.Groups["work"]
	g.Tasks, g.SignalTasks = []string{"work", "log"}, []string{"work"}
	sidecar.Groups["work"] = g
	running := alloc("a1-full-id", "train")
	running.RunningTasks = []string{"work", "log"}
	stoppedTask := alloc("a1-full-id", "train")
	stoppedTask.RunningTasks = []string{"log"}
	other := alloc("a1-other", "other") // same short ID, another job
	want := writtenTarget{Namespace: "ml", AllocID: "a1-full-id", Task: "work", Since: t0.Add(-doneSkew)}
	finished := signalledDrain(t0, true)
	finished.Finished = true
	tests := []struct {
		name   string
		drain  *Drain
		allocs []ObservedAlloc
		want   []writtenTarget
	}{
		{"signalled victim: its signalled task only", signalledDrain(t0, true), []ObservedAlloc{running}, []writtenTarget{want}},
		{"signal not sent yet", signalledDrain(t0, false), []ObservedAlloc{running}, nil},
		{"no signal (no grace)", &Drain{Group: "work", Allocs: []string{"a1"}}, []ObservedAlloc{running}, nil},
		{"finished: being stopped", finished, []ObservedAlloc{running}, nil},
		{"victim gone", signalledDrain(t0, true), nil, nil},
		{"the signalled task not running", signalledDrain(t0, true), []ObservedAlloc{stoppedTask}, nil},
		{"another job's allocation with the victim's prefix", signalledDrain(t0, true), []ObservedAlloc{other}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &JobState{Namespace: "ml", ID: "train", Draining: []*Drain{tt.drain}}
			obs := &Observation{Jobs: map[jobKey]*ObservedJob{{"ml", "train"}: sidecar, {"ml", "other"}: job("ml", "other", "training", 40, 1, 1)},
				Allocs: tt.allocs}
			got := writtenTargets([]*JobState{st}, obs)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("targets %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWrittenAnswer: what one read of a task's file says.
func TestWrittenAnswer(t *testing.T) {
	since, now := t0, t0.Add(time.Minute)
	file := func(at time.Time, mode string, dir bool) *api.AllocFileInfo {
		return &api.AllocFileInfo{Name: WrittenFile, ModTime: at, FileMode: mode, IsDir: dir}
	}
	tests := []struct {
		name   string
		info   *api.AllocFileInfo
		want   time.Time
		wantOK bool
	}{
		{"no file", nil, time.Time{}, false},
		{"written after the signal", file(t0.Add(10*time.Second), "-rw-r--r--", false), t0.Add(10 * time.Second), true},
		{"written at the signal's bound", file(since, "-rw-r--r--", false), since, true},
		{"from before the signal: an earlier answer, or a task's early claim", file(since.Add(-time.Second), "-rw-r--r--", false), time.Time{}, false},
		{"a directory", file(t0.Add(time.Second), "drwxr-xr-x", true), time.Time{}, false},
		{"a FIFO", file(t0.Add(time.Second), "prw-r--r--", false), time.Time{}, false},
		{"a client clock ahead: taken as now", file(now.Add(time.Hour), "-rw-r--r--", false), now, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := writtenAnswer(tt.info, since, now)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Errorf("writtenAnswer = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestReadWritten: the poll reads each pending file once, records answers
// (and reads an answered task no more), says once that the token lacks
// read-fs, and gives up on a file whose read does not end in time.
func TestReadWritten(t *testing.T) {
	target := writtenTarget{Namespace: "ml", AllocID: "a1-full-id", Task: "work", Since: t0}
	path := writtenPath("work")
	if path != "work/local/steward-checkpoint-written" {
		t.Fatalf("path %q", path)
	}
	tests := []struct {
		name        string
		file        *api.AllocFileInfo
		hook        func(ctx context.Context, _, _ string) error
		wantAnswer  bool
		wantPending int
		wantWarn    bool
	}{
		{"no file yet: read again next time", nil, nil, false, 1, false},
		{"an answer: recorded, not read again", &api.AllocFileInfo{ModTime: t0.Add(time.Second), FileMode: "-rw-r--r--"}, nil, true, 0, false},
		{"an old file: read again", &api.AllocFileInfo{ModTime: t0.Add(-time.Minute), FileMode: "-rw-r--r--"}, nil, false, 1, false},
		{"no read-fs: said once, read again", nil, func(context.Context, string, string) error {
			return needs(fmt.Errorf("Unexpected response code: %d (Permission denied)", http.StatusForbidden), "read-fs", "stat")
		}, false, 1, true},
		{"a read that hangs: given up", nil, func(ctx context.Context, _, _ string) error {
			<-ctx.Done()
			return ctx.Err()
		}, false, 0, false},
		{"another error: read again", nil, func(context.Context, string, string) error { return errInjected }, false, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			f.files = map[string]*api.AllocFileInfo{"a1-full-id:" + path: tt.file}
			f.statHook = tt.hook
			c := testController(t, f, withClock(func() time.Time { return t0.Add(time.Minute) }))
			c.drains.written.setTargets([]writtenTarget{target})
			warned := false
			got := c.drains.readWritten(context.Background(), c.drains.written.pending(), &warned)
			if got != tt.wantAnswer {
				t.Errorf("answered %v, want %v", got, tt.wantAnswer)
			}
			if n := len(c.drains.written.pending()); n != tt.wantPending {
				t.Errorf("%d pending after the read, want %d", n, tt.wantPending)
			}
			if warned != tt.wantWarn {
				t.Errorf("warned %v, want %v", warned, tt.wantWarn)
			}
		})
	}
}

// TestWrittenStoreForgets: answers and timeouts are kept only while a
// drain waits for their allocation.
func TestWrittenStoreForgets(t *testing.T) {
	var w writtenStore
	a := writtenTarget{Namespace: "ml", AllocID: "a", Task: "work", Since: t0}
	b := writtenTarget{Namespace: "ml", AllocID: "b", Task: "work", Since: t0}
	w.setTargets([]writtenTarget{a, b})
	w.answer(a, t0.Add(time.Second))
	w.giveUp(b)
	if p := w.pending(); len(p) != 0 {
		t.Fatalf("pending %v", p)
	}
	w.setTargets([]writtenTarget{b})
	if _, ok := w.answered()["a"]; ok {
		t.Error("the answer of an allocation no drain waits for is kept")
	}
	w.setTargets(nil)
	w.setTargets([]writtenTarget{b})
	if p := w.pending(); len(p) != 1 {
		t.Errorf("a timeout outlived its drain: pending %v", p)
	}
}

// TestDrainEndsWhenFileSaysWritten: a victim of any driver (no steward-exec
// events) whose file answered its signal is stopped in the next round,
// not at the end of its grace; an answer for another task, or none, keeps
// the grace.
func TestDrainEndsWhenFileSaysWritten(t *testing.T) {
	signaled := t0
	now := t0.Add(10 * time.Second)
	tests := []struct {
		name     string
		answers  map[string]time.Time
		wantStop bool
	}{
		{"its task's file answered", map[string]time.Time{"work": signaled.Add(5 * time.Second)}, true},
		{"another task's file", map[string]time.Time{"sidecar": signaled.Add(5 * time.Second)}, false},
		{"no answer", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad()
			c := testController(t, f, withClock(func() time.Time { return now }))
			c.state(jobKey{"ml", "train"}).Draining = []*Drain{signalledDrain(signaled, true)}
			target := writtenTarget{Namespace: "ml", AllocID: "a1", Since: signaled.Add(-doneSkew)}
			c.drains.written.setTargets([]writtenTarget{target})
			for task, at := range tt.answers {
				c.drains.written.answer(writtenTarget{AllocID: "a1", Task: task}, at)
			}
			r := roundWith([]*ObservedJob{job("ml", "train", "training", 40, 1, 1)}, []ObservedAlloc{alloc("a1", "train")})
			r.now, r.obs.At = now, now
			c.drains.finishDrains(context.Background(), r)
			stopped := len(f.callsMatching("scale ml/train work 0")) > 0
			if stopped != tt.wantStop {
				t.Fatalf("stopped %v, want %v (calls %q)", stopped, tt.wantStop, f.calls)
			}
		})
	}
}

// TestPollWrittenWakesTheLoop: a file written while the poll runs wakes
// the control loop within a few poll periods, not at the round's period.
func TestPollWrittenWakesTheLoop(t *testing.T) {
	f := newFakeNomad()
	c := testController(t, f, withClock(time.Now))
	c.drains.written.setTargets([]writtenTarget{{Namespace: "ml", AllocID: "a1", Task: "work", Since: time.Now().Add(-time.Second)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const period = 20 * time.Millisecond
	go c.drains.pollWritten(ctx, period)
	time.Sleep(3 * period)
	select {
	case <-c.trigger:
		t.Fatal("woken without an answer")
	default:
	}
	f.mu.Lock()
	written := time.Now()
	f.files = map[string]*api.AllocFileInfo{"a1:" + writtenPath("work"): {ModTime: written, FileMode: "-rw-r--r--"}}
	f.mu.Unlock()
	select {
	case <-c.trigger:
		if took := time.Since(written); took > 10*period {
			t.Errorf("woken %s after the file was written, poll period %s", took, period)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the loop was not woken by the answer")
	}
}
