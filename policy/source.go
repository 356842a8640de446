package policy

import (
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// Block types of the policy language.
const (
	blockDefaults   = "defaults"
	blockTier       = "tier"
	blockTenant     = "tenant"
	blockDepartment = "department"
	blockPool       = "pool"
	blockIdle       = "idle"
	blockPreemption = "preemption"
	blockPromote    = "promote"
	blockNotify     = "notify"
)

// where names a part of a policy: a block, one of its attributes, or one
// element of a list attribute. The checks in validate.go work on a resolved
// Policy and say where a problem is; a sourceMap turns that into a source
// range, so the same checks serve parsed and hand-built policies.
type where struct {
	block string // block type; "" for the policy as a whole
	name  string // the block's label; "" for unlabelled blocks
	attr  string // attribute; "" for the block itself
	elem  int    // 1-based element of a list attribute; 0 for the whole value
}

func whereBlock(block, name string) where { return where{block: block, name: name} }

func whereAttr(block, name, attr string) where { return where{block: block, name: name, attr: attr} }

// at returns the i'th (0-based) element of a list attribute.
func (w where) at(i int) where { w.elem = i + 1; return w }

// String is how Policy.Validate names a place: `tenant "research" limit`.
func (w where) String() string {
	s := w.block
	if w.block == blockPromote {
		s = blockPreemption + " " + s
	}
	if w.name != "" {
		s += " " + strconv.Quote(w.name)
	}
	if w.attr != "" {
		s += " " + w.attr
	}
	if w.elem > 0 {
		s += "[" + strconv.Itoa(w.elem-1) + "]"
	}
	if s == "" {
		s = "policy"
	}
	return s
}

// sourceMap remembers where each part of a parsed policy came from.
type sourceMap struct {
	// subject is the range a diagnostic about a place points at: the value
	// of an attribute, an element of a list, a block's header.
	subject map[where]hcl.Range
	// context is the whole "name = value" of an attribute, which the
	// diagnostic writer shows around the subject.
	context map[where]hcl.Range
	// broken holds places whose value did not decode; checks on the
	// resolved policy skip them rather than report a second, confusing error
	// about the default that stood in.
	broken map[where]bool
	// order lists each labelled block type's names in source order, so
	// diagnostics about pairs (two tenants, one namespace) blame the later.
	order map[string][]string
	// whole is the range of the first file, for problems with no place.
	whole hcl.Range
}

func newSourceMap() *sourceMap {
	return &sourceMap{
		subject: map[where]hcl.Range{},
		context: map[where]hcl.Range{},
		broken:  map[where]bool{},
		order:   map[string][]string{},
	}
}

// rangeOf returns where a diagnostic about w should point: w itself if it
// was written, else the nearest enclosing place that was (an attribute left
// to its default is blamed on its block), else the first file.
func (s *sourceMap) rangeOf(w where) (subject hcl.Range, context *hcl.Range) {
	for {
		if r, ok := s.subject[w]; ok {
			if c, ok := s.context[w]; ok {
				return r, &c
			}
			return r, nil
		}
		switch {
		case w.elem > 0:
			w.elem = 0
		case w.attr != "":
			w.attr = ""
		case w.block == blockPromote:
			w.block = blockPreemption
		case w.block != "":
			w = where{}
		default:
			return s.whole, nil
		}
	}
}

// isBroken reports whether w or the attribute holding it failed to decode.
func (s *sourceMap) isBroken(w where) bool {
	if s.broken[w] {
		return true
	}
	w.elem = 0
	return s.broken[w]
}
