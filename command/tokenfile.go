package command

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// readTokenFile reads a Nomad ACL token from a file, such as the workload
// identity Nomad writes to ${NOMAD_SECRETS_DIR}/nomad_token for a task
// with identity { file = true }: a token in a file, unlike one in the
// environment, is not inherited by every child process nor shown by
// `nomad alloc exec env`. Surrounding whitespace (a trailing newline) is
// not part of the token.
//
// A file that group or others may read is refused: Nomad writes the token
// 0600 for the task's user only when the task names a user, and 0666
// (0644 after the umask) otherwise, where any other task on the node that
// finds the file can take the controller's cluster-wide rights.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	defer f.Close()
	// The mode of the file opened, not of a path that may since point
	// elsewhere.
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	if err := tokenFileModeOK(path, fi.Mode()); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("read token file %s: it is empty", path)
	}
	return tok, nil
}

// tokenFileModeOK refuses a token file that anyone but its owner may
// read or write.
func tokenFileModeOK(path string, mode os.FileMode) error {
	if perm := mode.Perm(); perm&0o077 != 0 {
		return fmt.Errorf("token file %s has mode %04o: its group or other users may read or change it, and it holds a Nomad token; "+
			"refusing to run with it (run the task with a `user`, so that Nomad writes it 0600 for that user alone, or chmod 600 it)", path, perm)
	}
	return nil
}
