package doccheck

import (
	"fmt"

	"github.com/hashicorp/nomad/acl"
)

// checkACL parses a Nomad ACL policy strictly, as `nomad acl policy apply`
// has the server do.
func checkACL(ex Example) error {
	if _, err := acl.Parse(padded(ex, ""), acl.PolicyParseStrict); err != nil {
		return fmt.Errorf("Nomad's ACL policy parser rejects it: %w", err)
	}
	return nil
}
