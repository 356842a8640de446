package driver

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpu-steward/steward/policy"
)

// signalAliases are Linux names that golang.org/x/sys/unix does not map,
// for the same signals under other names.
var signalAliases = map[string]syscall.Signal{"SIGIOT": unix.SIGABRT, "SIGPOLL": unix.SIGIO}

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

func signalNum(name string) syscall.Signal {
	if s, ok := signalAliases[name]; ok {
		return s
	}
	return unix.SignalNum(name)
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
