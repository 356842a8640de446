package policy

import (
	"fmt"
	"strings"
)

// signalTable is Steward's one table of signals: every name a checkpoint
// signal may use, the ones Linux defines, so that a policy written on a
// laptop means the same on a Nomad client (Nomad itself takes names in this
// form), and what Steward knows of each. Signal numbers are not here: they
// differ between architectures, and the driver takes them from
// golang.org/x/sys/unix (KernelSignalName). The table is hand-written
// rather than consul-template's signals.SignalLookup because that library's
// table is the building machine's (a macOS laptop lacks SIGPWR and has
// SIGINFO); TestNomadSignalsAreNomads keeps the nomad column equal to it on
// Linux.
var signalTable = map[string]signalInfo{
	"SIGHUP": {nomad: true}, "SIGINT": {nomad: true}, "SIGQUIT": {nomad: true},
	"SIGILL": {nomad: true}, "SIGTRAP": {nomad: true}, "SIGABRT": {nomad: true},
	"SIGIOT": {nomad: true, sameAs: "SIGABRT"}, "SIGBUS": {nomad: true},
	"SIGFPE": {nomad: true}, "SIGKILL": {nomad: true, uncatchable: true},
	"SIGUSR1": {nomad: true}, "SIGSEGV": {nomad: true}, "SIGUSR2": {nomad: true},
	"SIGPIPE": {nomad: true}, "SIGALRM": {nomad: true}, "SIGTERM": {nomad: true},
	"SIGSTKFLT": {}, "SIGCHLD": {}, "SIGCONT": {nomad: true},
	"SIGSTOP": {nomad: true, uncatchable: true}, "SIGTSTP": {nomad: true},
	"SIGTTIN": {nomad: true}, "SIGTTOU": {nomad: true}, "SIGURG": {},
	"SIGXCPU": {nomad: true}, "SIGXFSZ": {nomad: true}, "SIGVTALRM": {},
	"SIGPROF": {nomad: true}, "SIGWINCH": {nomad: true}, "SIGIO": {nomad: true},
	"SIGPOLL": {sameAs: "SIGIO"}, "SIGPWR": {}, "SIGSYS": {nomad: true},
}

// signalInfo is what Steward knows of one signal name.
type signalInfo struct {
	// nomad: Nomad can send it to a task. Its raw_exec and exec drivers
	// look a signal up by name (consul-template's signals.SignalLookup) and
	// send SIGINT for a name they lack, interrupting the task instead of
	// asking it to checkpoint. A checkpoint signal must be one of these,
	// whatever the job's driver: the controller sends it through Nomad.
	nomad bool
	// uncatchable: a process cannot handle it, so a job sent it as its
	// checkpoint signal gets no chance to checkpoint.
	uncatchable bool
	// sameAs is the name golang.org/x/sys/unix knows the signal by, for
	// the Linux aliases it does not map.
	sameAs string
}

// The table's columns as sets, for the checks.
var (
	linuxSignals       = signalSet(func(signalInfo) bool { return true })
	nomadSignals       = signalSet(func(i signalInfo) bool { return i.nomad })
	uncatchableSignals = signalSet(func(i signalInfo) bool { return i.uncatchable })
)

func signalSet(in func(signalInfo) bool) map[string]bool {
	out := map[string]bool{}
	for name, info := range signalTable {
		if in(info) {
			out[name] = true
		}
	}
	return out
}

// KernelSignalName is the name golang.org/x/sys/unix's SignalNum knows a
// canonical signal name by: itself, or for an alias the signal's own name
// ("SIGIOT" is "SIGABRT", "SIGPOLL" is "SIGIO").
func KernelSignalName(name string) string {
	if info := signalTable[name]; info.sameAs != "" {
		return info.sameAs
	}
	return name
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
