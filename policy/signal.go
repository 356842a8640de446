package policy

import (
	"fmt"
	"strings"
)

// linuxSignals are the signal names a checkpoint signal may use: the ones
// Linux defines, so that a policy written on a laptop means the same on a
// Nomad client. Nomad itself takes signal names in this form.
var linuxSignals = map[string]bool{
	"SIGHUP": true, "SIGINT": true, "SIGQUIT": true, "SIGILL": true,
	"SIGTRAP": true, "SIGABRT": true, "SIGIOT": true, "SIGBUS": true,
	"SIGFPE": true, "SIGKILL": true, "SIGUSR1": true, "SIGSEGV": true,
	"SIGUSR2": true, "SIGPIPE": true, "SIGALRM": true, "SIGTERM": true,
	"SIGSTKFLT": true, "SIGCHLD": true, "SIGCONT": true, "SIGSTOP": true,
	"SIGTSTP": true, "SIGTTIN": true, "SIGTTOU": true, "SIGURG": true,
	"SIGXCPU": true, "SIGXFSZ": true, "SIGVTALRM": true, "SIGPROF": true,
	"SIGWINCH": true, "SIGIO": true, "SIGPOLL": true, "SIGPWR": true,
	"SIGSYS": true,
}

// nomadSignals are the names Nomad can send to a task: its raw_exec and
// exec drivers look a signal up by name (consul-template's
// signals.SignalLookup) and send SIGINT for a name they lack, interrupting
// the task instead of asking it to checkpoint. A checkpoint signal must be
// one of these, whatever the job's driver: the controller sends it through
// Nomad. TestNomadSignalsAreNomads keeps the list Nomad's.
var nomadSignals = map[string]bool{
	"SIGABRT": true, "SIGALRM": true, "SIGBUS": true, "SIGCONT": true,
	"SIGFPE": true, "SIGHUP": true, "SIGILL": true, "SIGINT": true,
	"SIGIO": true, "SIGIOT": true, "SIGKILL": true, "SIGPIPE": true,
	"SIGPROF": true, "SIGQUIT": true, "SIGSEGV": true, "SIGSTOP": true,
	"SIGSYS": true, "SIGTERM": true, "SIGTRAP": true, "SIGTSTP": true,
	"SIGTTIN": true, "SIGTTOU": true, "SIGUSR1": true, "SIGUSR2": true,
	"SIGWINCH": true, "SIGXCPU": true, "SIGXFSZ": true,
}

// CheckpointSignal is NormalizeSignal for a checkpoint signal, which the
// controller sends through Nomad: a Linux signal name Nomad cannot send
// (SIGPWR, say: raw_exec and exec would send SIGINT) is refused too.
func CheckpointSignal(s string) (string, error) {
	name, err := NormalizeSignal(s)
	if err != nil || name == "" || nomadSignals[name] {
		return name, err
	}
	return "", fmt.Errorf("%q is a signal Nomad cannot send: its raw_exec and exec drivers would send SIGINT instead", s)
}

// uncatchableSignals cannot be handled by a process, so a job sent one as its
// checkpoint signal gets no chance to checkpoint.
var uncatchableSignals = map[string]bool{"SIGKILL": true, "SIGSTOP": true}

// SignalNames returns the signal names NormalizeSignal accepts, sorted.
func SignalNames() []string { return keys(linuxSignals) }

// NormalizeSignal turns a checkpoint signal as a person writes it into the
// form Policy holds: "usr1", "USR1" and "SIGUSR1" all become "SIGUSR1", and
// "" or "none" (any case) become "", meaning no checkpoint signal. The engine
// uses it for the per-job override in the checkpoint meta key too.
func NormalizeSignal(s string) (string, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if name == "" || name == strings.ToUpper(CheckpointNone) {
		return "", nil
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if !linuxSignals[name] {
		return "", fmt.Errorf("%q is not a Linux signal name", s)
	}
	return name, nil
}

// closestSignal suggests a signal for a misspelt one, or "": one Nomad
// can send, the only ones a checkpoint signal may be.
func closestSignal(s string) string {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	return closest(name, keys(nomadSignals))
}
