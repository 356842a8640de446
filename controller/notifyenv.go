package controller

import (
	"fmt"
	"os"
	"strings"
)

// NotifyEnvSkipped is the environment variable in which the shipped
// controller job (jobs/steward-controller.nomad.hcl) lists, each name
// quoted, the items of its notify secrets variable
// (nomad/jobs/steward-controller/controller/controller) that it did not
// pass as environment variables: names that are not environment names, or
// are Nomad's own (NOMAD_*), or values holding a NUL byte. They are
// skipped, never renamed, so that a name the policy reads is either there
// as written or not at all; this says which and why.
const NotifyEnvSkipped = "STEWARD_NOTIFY_ENV_SKIPPED"

// notifyEnvSkippedHint is what a "not set" error adds when the job
// skipped items: most likely the one the policy wanted, misnamed.
func notifyEnvSkippedHint() string {
	s := os.Getenv(NotifyEnvSkipped)
	if s == "" {
		return ""
	}
	return fmt.Sprintf(" (the controller job skipped items of its Nomad variable, names that are not environment variable names, start with NOMAD_, or values with a NUL byte: %s)", s)
}

// NotifyEnvVariable is the Nomad variable (namespace steward) whose items
// the shipped controller job gives its task as environment variables: the
// job's, group's and task's own path, which its workload identity reads
// without a rule.
const NotifyEnvVariable = "nomad/jobs/steward-controller/controller/controller"

// CheckNotifyEnvItem says why an item of the notify secrets variable
// cannot be an environment variable of the controller, as the shipped
// job's template decides (jobs/steward-controller.nomad.hcl): its name is
// not an environment variable's name, is one Nomad sets (NOMAD_*, which
// would replace the task's own, its API address among them) or this
// list's own, or its value holds a NUL byte.
func CheckNotifyEnvItem(name, value string) error {
	switch {
	case !envName(name):
		return fmt.Errorf("%q is not an environment variable name (letters, digits and underscores, not starting with a digit)", name)
	case strings.HasPrefix(name, "NOMAD_"):
		return fmt.Errorf("%s starts with NOMAD_: Nomad sets those, and the task's own would be replaced", name)
	case name == NotifyEnvSkipped:
		return fmt.Errorf("%s is the controller job's own", name)
	case strings.ContainsRune(value, 0):
		return fmt.Errorf("the value of %s holds a NUL byte, which no environment can carry", name)
	}
	return nil
}

func envName(s string) bool {
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}
