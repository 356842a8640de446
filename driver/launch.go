package driver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/nomad/plugins/drivers"
)

// How a task's process is made: its user, environment, executable, working
// dir, process group and logs.

// deviceEnvOf is the environment the device plugins gave the task. Nomad
// also merges it into Env; DeviceEnv alone says which GPUs are the task's.
func deviceEnvOf(cfg *drivers.TaskConfig) map[string]string {
	if cfg.DeviceEnv != nil {
		return cfg.DeviceEnv
	}
	return map[string]string{}
}

// taskEnv builds the task's environment: Nomad's (which includes what the
// device plugins set), the GPU restriction and Steward's variables. The
// plugin's own environment is not passed on.
func taskEnv(cfg *drivers.TaskConfig, ckptDir string, persistent bool, ckptSignal string, resumed bool, count int) []string {
	env := make(map[string]string, len(cfg.Env)+8)
	for k, v := range cfg.Env {
		env[k] = v
	}
	for k, v := range cfg.DeviceEnv {
		env[k] = v
	}
	// NVIDIA_VISIBLE_DEVICES restricts containers; a plain process sees
	// every GPU unless CUDA_VISIBLE_DEVICES says otherwise. A task without
	// GPUs gets an empty list: CUDA then sees none.
	env["CUDA_VISIBLE_DEVICES"] = strings.Join(taskGPUs(deviceEnvOf(cfg)), ",")
	env[EnvCheckpointDir] = ckptDir
	env[EnvCheckpointDirPersistent] = boolEnv(persistent)
	env[EnvCheckpointSignal] = ckptSignal
	env[EnvCheckpointDone] = filepath.Join(ckptDir, doneFile)
	env[EnvResumed] = boolEnv(resumed)
	env[EnvResumeCount] = strconv.Itoa(count)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func boolEnv(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// command builds the task's process: its own process group, so signals
// and the final SIGKILL reach everything it started, and so that it does
// not get the signals meant for the plugin.
func (d *Driver) command(cfg *drivers.TaskConfig, tc *TaskConfig, env []string, cred *syscall.Credential) (*exec.Cmd, error) {
	taskDir := cfg.TaskDir().Dir
	path, err := resolveCommand(tc.Command, taskDir, env)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: append([]string{tc.Command}, tc.Args...), Env: env, Dir: taskDir}
	if tc.WorkDir != "" {
		cmd.Dir = tc.WorkDir
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	return cmd, nil
}

// resolveCommand finds the executable: a relative path is relative to the
// task dir; a bare name is looked up in the task's PATH, then the
// plugin's.
func resolveCommand(command, taskDir string, env []string) (string, error) {
	if strings.ContainsRune(command, '/') {
		p := command
		if !filepath.IsAbs(p) {
			p = filepath.Join(taskDir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("command %q: %w", command, err)
		}
		return p, nil
	}
	var dirs []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			dirs = filepath.SplitList(v)
		}
	}
	dirs = append(dirs, filepath.SplitList(os.Getenv("PATH"))...)
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, command); checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q: not found in the task's PATH", command)
}

func checkExecutable(p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// attachLogs connects the task's stdout and stderr to Nomad's log FIFOs.
// The returned func closes the plugin's copies once the child has them.
func attachLogs(cmd *exec.Cmd, cfg *drivers.TaskConfig) (func(), error) {
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	open := func(path string) (*os.File, error) {
		if path == "" {
			return nil, nil // no log: the child gets /dev/null
		}
		// Opening a FIFO for writing waits for its reader (Nomad's log
		// collector, already running).
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("opening the task's log %s: %w", path, err)
		}
		opened = append(opened, f)
		return f, nil
	}
	stdout, err := open(cfg.StdoutPath)
	if err != nil {
		return nil, err
	}
	stderr, err := open(cfg.StderrPath)
	if err != nil {
		closeAll()
		return nil, err
	}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	return closeAll, nil
}
