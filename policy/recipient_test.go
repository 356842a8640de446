package policy

import (
	"strings"
	"testing"
)

// TestRecipients: what a job may name as its recipient (its meta, written
// by a tenant) and which per-job blocks take it: bounded, of a small
// charset with nothing that could end a header or a line, and within the
// block's allowlist pattern.
func TestRecipients(t *testing.T) {
	users := &Notify{Name: "users", PerJob: true, Recipients: `[a-z0-9.-]+@example\.com`}
	anyone := &Notify{Name: "any", PerJob: true}
	ops := &Notify{Name: "ops"}
	for _, tc := range []struct {
		name, recipient, refused string
		users, anyone            bool
	}{
		{name: "an address of the allowed domain", recipient: "ada@example.com", users: true, anyone: true},
		{name: "another domain: only the block without a pattern", recipient: "ada@evil.example.org", anyone: true},
		{name: "a pattern matches as a whole", recipient: "ada@example.com.evil.org", anyone: true},
		{name: "a channel", recipient: "#ml-team", anyone: true},
		{name: "a newline (header injection)", recipient: "ada@example.com\r\nX-Evil: 1", refused: "only letters, digits"},
		{name: "a URL", recipient: "https://evil.example.org/", refused: "only letters, digits"},
		{name: "too long", recipient: strings.Repeat("a", RecipientMax+1), refused: "129 bytes, over 128"},
		{name: "empty", recipient: "", refused: "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidRecipient(tc.recipient); !strings.HasPrefix(got, tc.refused) || (got == "") != (tc.refused == "") {
				t.Errorf("ValidRecipient = %q, want %q…", got, tc.refused)
			}
			if got := users.Takes(tc.recipient); got != tc.users {
				t.Errorf("the block with a pattern takes it: %v, want %v", got, tc.users)
			}
			if got := anyone.Takes(tc.recipient); got != tc.anyone {
				t.Errorf("the block without a pattern takes it: %v, want %v", got, tc.anyone)
			}
			if ops.Takes(tc.recipient) {
				t.Errorf("a block that is not per_job takes a recipient")
			}
		})
	}
}
