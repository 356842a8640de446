package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ExpandPaths replaces each directory among paths by its policy
// files and drops repeats. Anything else is passed on as a file, so that a
// missing file is reported by the parser like any other unreadable one.
func ExpandPaths(paths []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[filepath.Clean(p)] {
			seen[filepath.Clean(p)] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil || !info.IsDir() {
			add(p)
			continue
		}
		entries, err := os.ReadDir(p) // sorted by name
		if err != nil {
			return nil, fmt.Errorf("reading policy directory %s: %w", p, err)
		}
		n := 0
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".hcl", ".json":
				if e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0 {
					add(filepath.Join(p, e.Name()))
					n++
				}
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("policy directory %s holds no .hcl or .json files", p)
		}
	}
	return out, nil
}
