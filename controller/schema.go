package controller

import (
	"errors"
	"fmt"
	"strconv"
)

// State schema versions (issue 34, item 6). Every job state carries the
// version of its format in an item of its own ("schema", beside "state"),
// and every record in steward_schema. A state saved before versions were
// kept has none, and reads as version 1, which is what this controller
// writes: the format did not change, only its label.
//
// A controller that finds a state of a newer version than it knows
// (written by a newer controller, during a rolling upgrade that went
// backwards or a downgrade) does not read it, overwrite it or act on the
// others: it refuses to lead (errNewerState), says so in its log and in
// steward_state_schema_refusals_total, and leaves the lock to another copy
// (a newer one), trying again after a TTL. Leading on part of the states,
// it would resume work a newer leader holds, or forget a preemption in
// its grace.
//
// Records live in the jobs' own namespaces, where their tenants may write:
// a record of a newer version is left as it is (that job's record alone;
// decisions go on), never a reason to stop leading.

// stateSchema is the version of the state and record format this
// controller reads and writes. Raise it, with a note in CHANGELOG.md and
// docs/operations.md ("Upgrades"), when an older controller would misread
// what this one writes.
const stateSchema = 1

const (
	schemaItem       = "schema"         // in a job state's variable
	recordSchemaItem = "steward_schema" // in a job's record
)

// errNewerState: a state written by a newer controller.
var errNewerState = errors.New("job state of a newer schema than this controller knows")

// schemaOf is the schema version an item says: 1 when absent (saved before
// versions were kept); an error for one this controller does not know: a
// newer version, or a value that is not a version at all.
func schemaOf(v string, present bool) (int, error) {
	if !present {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: schema %q is not a version this controller knows (it writes %d)", errNewerState, clip(v, quoteMax), stateSchema)
	}
	if n > stateSchema {
		return n, fmt.Errorf("%w: schema %d, this controller knows up to %d: upgrade this controller (docs/operations.md, \"Upgrades\")",
			errNewerState, n, stateSchema)
	}
	return n, nil
}

// newerRecord reports whether a job's record was written by a newer
// controller (its steward_schema above stateSchema): it is left alone.
func newerRecord(old map[string]string) bool {
	v, ok := old[recordSchemaItem]
	_, err := schemaOf(v, ok)
	return err != nil
}

// refuseNewer ends a lead term on states of a newer schema: it acts on
// nothing, says why where operators look (log, /healthz, metric), and
// returns the error so that the election leaves the lock to another copy
// for a TTL before this one asks again (holdLease).
func (c *Controller) refuseNewer(err error) error {
	c.log().Error("refusing to lead: the state was written by a newer controller; nothing is changed until a controller that knows it leads",
		"schema_known", stateSchema, "error", err)
	c.setHealth(func(h *Health) { h.LastError = err.Error() })
	return err
}
