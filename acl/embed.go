// Package acl carries the Nomad ACL policies Steward ships, so that
// `steward operator setup` applies the same rules as
// `nomad acl policy apply ... acl/steward-controller.policy.hcl`.
package acl

import _ "embed"

// Controller is acl/steward-controller.policy.hcl: the controller's rights,
// bound to its job's workload identity.
//
//go:embed steward-controller.policy.hcl
var Controller string
