package dist

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Module is a Go module linked into a binary.
type Module struct {
	Path, Version string
	// Dir is its source in the module cache (the replacement's, for a
	// replaced module).
	Dir string
}

// licenceFiles are the names a module's licence text goes by.
var licenceFiles = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([.-].*)?$`)

// ModuleLicence names the licence of a module's own licence file(s) by
// SPDX identifier, "A AND B" for several (a module shipping an MIT and an
// Apache file), "" when no file is recognised.
func ModuleLicence(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	found := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !licenceFiles.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if id := classify(string(b)); id != "" {
			found[id] = true
		}
	}
	ids := make([]string, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, " AND ")
}

// classify recognises a licence text by phrases of its standard text.
func classify(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(t, x) {
				return false
			}
		}
		return true
	}
	switch {
	case has("SIL OPEN FONT LICENSE Version 1.1") || has("SIL Open Font License, Version 1.1"):
		return "OFL-1.1"
	case has("Creative Commons Attribution 4.0 International Public License"):
		return "CC-BY-4.0"
	case has("The FreeType License", "GNU General Public License (GPL), version 2 or later"):
		return "FTL OR GPL-2.0-or-later"
	case has("Business Source License 1.1"):
		return "BUSL-1.1"
	case has("Mozilla Public License", "2.0"):
		return "MPL-2.0"
	case has("Apache License", "Version 2.0"):
		return "Apache-2.0"
	case has("Permission is hereby granted, free of charge"):
		return "MIT"
	case has("Redistribution and use in source and binary forms") && (has("Neither the name") || has("names of its contributors may be used")):
		return "BSD-3-Clause"
	case has("Redistribution and use in source and binary forms"):
		return "BSD-2-Clause"
	case has("Permission to use, copy, modify, and/or distribute this software"), has("Permission to use, copy, modify, and distribute this software for any purpose with or without fee"):
		return "ISC"
	case has("This is free and unencumbered software released into the public domain"):
		return "Unlicense"
	case has("CC0 1.0 Universal"):
		return "CC0-1.0"
	}
	return ""
}
