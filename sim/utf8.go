package sim

import (
	"fmt"
	"unicode/utf8"
)

// Traces are text: a byte that is not UTF-8 means a file in another
// encoding (Latin-1 user names, say) or not a trace at all. It is an
// error at its line and column rather than a garbled name carried into
// job IDs, tenants and the report.

// firstInvalidUTF8 returns the first field of rec that is not valid UTF-8
// and the offset of its first bad byte; field is -1 when all are valid.
func firstInvalidUTF8(rec []string) (field, at int) {
	for i, f := range rec {
		if utf8.ValidString(f) {
			continue
		}
		for at := 0; at < len(f); {
			r, size := utf8.DecodeRuneInString(f[at:])
			if r == utf8.RuneError && size <= 1 {
				return i, at
			}
			at += size
		}
	}
	return -1, 0
}

// utf8Error reports rec's first non-UTF-8 field at line, naming it from
// names (the header) when it has a name.
func utf8Error(rec, names []string, line int) *RowError {
	i, at := firstInvalidUTF8(rec)
	if i < 0 {
		return nil
	}
	name := "unnamed"
	if i < len(names) && names[i] != "" {
		name = names[i]
	}
	return &RowError{Line: line, Column: i + 1, Field: name,
		Msg: fmt.Sprintf("not valid UTF-8 (byte %d of the field)", at+1)}
}
