// Package jobs carries the jobspecs Steward ships, so that `steward
// operator setup` registers the same controller job an operator would
// run by hand (`nomad job run jobs/steward-controller.nomad.hcl`), from a
// release binary without the repository beside it.
package jobs

import _ "embed"

// Controller is jobs/steward-controller.nomad.hcl.
//
//go:embed steward-controller.nomad.hcl
var Controller string
