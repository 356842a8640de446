package command

import (
	"fmt"
	"os"
	"strings"
)

// readTokenFile reads a Nomad ACL token from a file, such as the workload
// identity Nomad writes to ${NOMAD_SECRETS_DIR}/nomad_token for a task
// with identity { file = true }: a token in a file, unlike one in the
// environment, is not inherited by every child process nor shown by
// `nomad alloc exec env`. Surrounding whitespace (a trailing newline) is
// not part of the token.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("read token file %s: it is empty", path)
	}
	return tok, nil
}
