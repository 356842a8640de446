package driver

import (
	"syscall"
	"testing"

	"github.com/gpu-steward/steward/policy"
)

// Every name in the policy's signal table is a signal here, aliases
// included: the driver accepts what the policy accepts.
func TestSignalNumCoversThePolicyTable(t *testing.T) {
	for _, name := range policy.SignalNames() {
		if signalNum(name) == 0 {
			t.Errorf("signalNum(%s) = 0: the policy's table has a name golang.org/x/sys/unix does not know (give it a sameAs)", name)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     syscall.Signal
		wantErr  bool
	}{
		{"canonical", "SIGUSR1", syscall.SIGUSR1, false},
		{"short and lower case", "usr2", syscall.SIGUSR2, false},
		{"alias of SIGABRT", "SIGIOT", syscall.SIGABRT, false},
		{"alias of SIGIO", "poll", syscall.SIGIO, false},
		{"none is no signal", "none", 0, true},
		{"empty", "", 0, true},
		{"unknown", "SIGFOO", 0, true},
		{"number", "10", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSignal(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("parseSignal(%q) = %v, %v; want %v (error: %t)", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
