// Command trainer is Steward's example training program: it does "work"
// step by step, checkpoints every few steps and when asked to (the
// steward-exec driver's checkpoint signal), and resumes from its checkpoint
// when it runs again. Its output proves how much progress a preemption
// cost: the previous run's last step, the checkpoint it resumed from, and
// the difference, which is at most one checkpoint interval.
//
// It speaks Steward's checkpoint contract under any driver (docs/reference/driver.md,
// "The checkpoint contract"): it checkpoints on STEWARD_CHECKPOINT_SIGNAL
// into STEWARD_CHECKPOINT_DIR, then says the checkpoint is written by
// touching ${NOMAD_TASK_DIR}/steward-checkpoint-written (read by the
// controller, any driver) and, under steward-exec, STEWARD_CHECKPOINT_DONE;
// it learns that it resumes from STEWARD_RESUMED and STEWARD_RESUME_COUNT
// (set by steward-exec, or rendered from the job's record by a template
// under any other driver). On simulated GPUs it reports its utilisation to
// STEWARD_SIM_ACTIVITY_FILES. jobs/trainer.nomad.hcl runs it under
// steward-exec, jobs/train-docker.nomad.hcl in a container.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// checkpoint is the saved training state.
type checkpoint struct {
	Step    int       `json:"step"`
	SavedAt time.Time `json:"saved_at"`
	Why     string    `json:"why"`
}

const (
	checkpointFile = "checkpoint.json"
	// progressFile holds the last step reached, written every step: on
	// resume it tells how much work the checkpoint did not cover.
	progressFile = "progress"
)

func main() {
	os.Exit(run())
}

func run() int {
	steps := flag.Int("steps", 1000, "steps to train in all")
	stepTime := flag.Duration("step-time", 200*time.Millisecond, "duration of one step")
	every := flag.Int("checkpoint-every", 10, "checkpoint interval, in steps")
	dir := flag.String("dir", os.Getenv("STEWARD_CHECKPOINT_DIR"), "checkpoint dir (default $STEWARD_CHECKPOINT_DIR)")
	util := flag.Int("gpu-util", 80, "GPU utilisation (%) reported to simulated GPUs while training")
	saveOnStop := flag.Bool("save-on-stop", true, "checkpoint when stopped (SIGINT/SIGTERM) before exiting")
	flag.Parse()
	if *dir == "" {
		*dir = "checkpoints"
	}
	if *every < 1 {
		fmt.Fprintln(os.Stderr, "trainer: -checkpoint-every must be at least 1")
		return 2
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "trainer: checkpoint dir: %v\n", err)
		return 1
	}

	ckptSig := os.Getenv("STEWARD_CHECKPOINT_SIGNAL")
	if ckptSig == "" {
		ckptSig = "SIGUSR1"
	}
	fmt.Printf("trainer: STEWARD_RESUMED=%s STEWARD_RESUME_COUNT=%s checkpoint dir %s, checkpoint signal %s, interval %d steps\n",
		os.Getenv("STEWARD_RESUMED"), os.Getenv("STEWARD_RESUME_COUNT"), *dir, ckptSig, *every)

	start := 0
	ck, err := load(*dir)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "trainer: %v\n", err)
		return 1
	case ck != nil:
		reached := lastProgress(*dir)
		lost := reached - ck.Step
		fmt.Printf("trainer: resuming from checkpoint at step %d (saved %s, %s); previous run reached step %d: lost %d steps (checkpoint interval %d)\n",
			ck.Step, ck.SavedAt.Format(time.RFC3339), ck.Why, reached, lost, *every)
		if lost > *every {
			fmt.Printf("trainer: LOST MORE THAN ONE CHECKPOINT INTERVAL\n")
		}
		start = ck.Step
	case os.Getenv("STEWARD_RESUMED") == "1":
		fmt.Println("trainer: resumed, but no checkpoint found: starting from step 0")
	default:
		fmt.Println("trainer: no checkpoint: starting from step 0")
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var ckptSignal os.Signal
	if n := unix.SignalNum(strings.ToUpper(ckptSig)); n != 0 {
		ckptSignal = n
		signal.Notify(sigs, n)
	}

	reportGPU(*util)
	defer reportGPU(0)
	tick := time.NewTicker(*stepTime)
	defer tick.Stop()
	step := start
	for step < *steps {
		select {
		case s := <-sigs:
			if s == ckptSignal {
				if err := save(*dir, step, fmt.Sprintf("%s: preemption expected", ckptSig)); err != nil {
					fmt.Fprintf(os.Stderr, "trainer: %v\n", err)
					return 1
				}
				fmt.Printf("trainer: checkpoint at step %d (%s received)\n", step, ckptSig)
				// Say it is written: Steward then stops this run now
				// rather than at the end of its grace, whose work the
				// checkpoint would not hold.
				if at, err := sayWritten(writtenFiles()); err != nil {
					fmt.Fprintf(os.Stderr, "trainer: %v\n", err)
				} else if !at.IsZero() {
					fmt.Printf("trainer: checkpoint written at %s\n", at.UTC().Format(time.RFC3339Nano))
				}
				continue
			}
			if *saveOnStop {
				if err := save(*dir, step, fmt.Sprintf("stopped by %s", s)); err != nil {
					fmt.Fprintf(os.Stderr, "trainer: %v\n", err)
					return 1
				}
				fmt.Printf("trainer: stopping at step %d (%s): checkpoint saved\n", step, s)
			} else {
				fmt.Printf("trainer: stopping at step %d (%s) without a checkpoint\n", step, s)
			}
			return 0
		case <-tick.C:
		}
		step++
		if err := writeFile(*dir, progressFile, []byte(strconv.Itoa(step)+"\n")); err != nil {
			fmt.Fprintf(os.Stderr, "trainer: %v\n", err)
			return 1
		}
		fmt.Printf("trainer: step %d\n", step)
		if step%*every == 0 {
			if err := save(*dir, step, "periodic"); err != nil {
				fmt.Fprintf(os.Stderr, "trainer: %v\n", err)
				return 1
			}
			fmt.Printf("trainer: checkpoint at step %d (periodic)\n", step)
		}
	}
	fmt.Printf("trainer: training complete at step %d\n", step)
	return 0
}

// writtenFiles are the files that say a signalled checkpoint is written:
// under steward-exec its STEWARD_CHECKPOINT_DONE alone, which the driver
// reports as a task event the Nomad UI shows ("Checkpoint written at …")
// and the controller stops on; under any other driver the contract's file
// in the task dir (STEWARD_CHECKPOINT_WRITTEN overrides its path), which
// the controller reads. Not both: the controller polls the contract's
// file every 250 ms and would often stop the task before the driver's
// scan had reported the event, leaving the user no word of it.
func writtenFiles() []string {
	if f := os.Getenv("STEWARD_CHECKPOINT_DONE"); f != "" {
		return []string{f}
	}
	if f := os.Getenv("STEWARD_CHECKPOINT_WRITTEN"); f != "" {
		return []string{f}
	}
	if dir := os.Getenv("NOMAD_TASK_DIR"); dir != "" {
		return []string{filepath.Join(dir, "steward-checkpoint-written")}
	}
	return nil
}

// sayWritten touches each file (creates it, or sets its time to now) and
// returns the time it wrote; zero without files.
func sayWritten(files []string) (time.Time, error) {
	if len(files) == 0 {
		return time.Time{}, nil
	}
	now := time.Now()
	for _, f := range files {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return time.Time{}, fmt.Errorf("saying the checkpoint is written: %w", err)
		}
		if err := os.Chtimes(f, now, now); err != nil {
			return time.Time{}, fmt.Errorf("saying the checkpoint is written: %w", err)
		}
	}
	return now, nil
}

func load(dir string) (*checkpoint, error) {
	raw, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	var ck checkpoint
	if err := json.Unmarshal(raw, &ck); err != nil {
		return nil, fmt.Errorf("checkpoint %s is corrupt: %w", filepath.Join(dir, checkpointFile), err)
	}
	return &ck, nil
}

func lastProgress(dir string) int {
	raw, _ := os.ReadFile(filepath.Join(dir, progressFile))
	n, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return n
}

func save(dir string, step int, why string) error {
	raw, err := json.Marshal(checkpoint{Step: step, SavedAt: time.Now().UTC(), Why: why})
	if err != nil {
		return err
	}
	if err := writeFile(dir, checkpointFile, append(raw, '\n')); err != nil {
		return fmt.Errorf("saving checkpoint: %w", err)
	}
	return nil
}

// writeFile replaces a file atomically: a kill mid-write leaves the old one.
func writeFile(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// reportGPU writes the utilisation to each simulated GPU's activity file
// (steward-gpu with backend = "sim"); on real GPUs there are none.
func reportGPU(percent int) {
	for _, f := range strings.Split(os.Getenv("STEWARD_SIM_ACTIVITY_FILES"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			if err := os.WriteFile(f, []byte(strconv.Itoa(percent)+"\n"), 0o666); err != nil {
				fmt.Fprintf(os.Stderr, "trainer: reporting GPU activity: %v\n", err)
			}
		}
	}
}
