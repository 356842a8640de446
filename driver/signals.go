package driver

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// normaliseSignal turns "usr1", "SIGUSR1" or "none" into the canonical
// "SIGUSR1" / "none", or says why the name is not a signal.
func normaliseSignal(name string) (string, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if n == "NONE" {
		return signalNone, nil
	}
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	if unix.SignalNum(n) == 0 {
		return "", fmt.Errorf("%q is not a signal name (like \"SIGUSR1\", or \"none\")", name)
	}
	return n, nil
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
	return unix.SignalNum(n), nil
}
