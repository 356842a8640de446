package driver

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpu-steward/steward/policy"
)

// normaliseSignal turns "usr1", "SIGUSR1" or "none" into the canonical
// "SIGUSR1" / "none", or says why the name is not a signal. The names are
// the policy language's (policy.NormalizeSignal), so that the driver and
// the controller accept and refuse the same job meta.
func normaliseSignal(name string) (string, error) {
	n, err := policy.NormalizeSignal(name)
	// The policy reads "" as "none"; here "" is never a signal name (an
	// unset option is resolved before).
	if err != nil || strings.TrimSpace(name) == "" || (n != "" && signalNum(n) == 0) {
		return "", fmt.Errorf("%q is not a signal name (like \"SIGUSR1\", or \"none\")", name)
	}
	if n == "" {
		return signalNone, nil
	}
	return n, nil
}

// signalNum is a canonical name's number on this machine: the names are the
// policy's one table, the numbers golang.org/x/sys/unix's.
func signalNum(name string) syscall.Signal {
	return unix.SignalNum(policy.KernelSignalName(name))
}

// parseSignal returns the signal for a name, or an error naming it.
func parseSignal(name string) (syscall.Signal, error) {
	n, err := normaliseSignal(name)
	if err != nil {
		return 0, err
	}
	if n == signalNone {
		return 0, fmt.Errorf("%q is not a signal", name)
	}
	return signalNum(n), nil
}
