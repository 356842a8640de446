package policy

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// attrs decodes one block's attributes into Go values. Values are literals:
// expressions are evaluated with no variables and no functions, so a policy
// means the same wherever it is read. Each method records the value's range
// in the source map, leaves dst alone when the attribute is absent (callers
// preset the default) and reports whether it set dst.
type attrs struct {
	block, name string
	// prefix goes before attribute names in places: `pool "h100" ` for
	// a tenant's pool block.
	prefix string
	attrs  hcl.Attributes
	src    *sourceMap
	diags  hcl.Diagnostics
}

func (a *attrs) where(attr string) where {
	if a.prefix != "" {
		attr = a.prefix + " " + attr
	}
	return whereAttr(a.block, a.name, attr)
}

// fail reports a value that cannot be decoded and marks its place broken.
func (a *attrs) fail(w where, subject hcl.Range, summary, detail string) {
	a.src.broken[w] = true
	d := &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: subject.Ptr()}
	if attr, ok := a.attrs[strings.TrimPrefix(w.attr, a.prefix+" ")]; ok {
		d.Context = attr.Range.Ptr()
	}
	a.diags = append(a.diags, d)
}

// value evaluates attribute name and converts it to ty; want says what was
// expected in words ("a number"). ok is false when the attribute is absent
// or its value is unusable (which has been reported).
func (a *attrs) value(name string, ty cty.Type, want string) (cty.Value, bool) {
	attr, ok := a.attrs[name]
	if !ok {
		return cty.NilVal, false
	}
	w := a.where(name)
	a.src.subject[w] = attr.Expr.Range()
	a.src.context[w] = attr.Range
	v, diags := attr.Expr.Value(nil)
	a.diags = append(a.diags, diags...)
	if diags.HasErrors() {
		a.src.broken[w] = true
		return cty.NilVal, false
	}
	if v.IsNull() {
		a.fail(w, attr.Expr.Range(), "Invalid null value",
			fmt.Sprintf("The value of %q must be %s, not null; leave the attribute out to take its default.", name, want))
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil || !cv.IsWhollyKnown() {
		a.fail(w, attr.Expr.Range(), "Incorrect attribute value type",
			fmt.Sprintf("Inappropriate value for attribute %q: %s is required.", name, want))
		return cty.NilVal, false
	}
	return cv, true
}

func (a *attrs) str(name string, dst *string) bool {
	v, ok := a.value(name, cty.String, "a string")
	if ok {
		*dst = v.AsString()
	}
	return ok
}

func (a *attrs) boolean(name string, dst *bool) bool {
	v, ok := a.value(name, cty.Bool, "a bool (true or false)")
	if ok {
		*dst = v.True()
	}
	return ok
}

// integer decodes a whole number that fits in 32 bits, which is plenty for
// GPU counts and priorities and keeps arithmetic on them from overflowing.
func (a *attrs) integer(name string, dst *int) bool {
	v, ok := a.value(name, cty.Number, "a whole number")
	if !ok {
		return false
	}
	bf := v.AsBigFloat()
	i, acc := bf.Int64()
	switch {
	case !bf.IsInt():
		a.fail(a.where(name), a.attrs[name].Expr.Range(), "Invalid whole number",
			fmt.Sprintf("The value of %q must be a whole number, not %s.", name, bf.Text('g', 10)))
		return false
	case acc != big.Exact || i < math.MinInt32 || i > math.MaxInt32:
		a.fail(a.where(name), a.attrs[name].Expr.Range(), "Number out of range",
			fmt.Sprintf("The value of %q is too large: %s.", name, bf.Text('g', 10)))
		return false
	}
	*dst = int(i)
	return true
}

func (a *attrs) number(name string, dst *float64) bool {
	v, ok := a.value(name, cty.Number, "a number")
	if !ok {
		return false
	}
	f, _ := v.AsBigFloat().Float64()
	if math.IsInf(f, 0) {
		a.fail(a.where(name), a.attrs[name].Expr.Range(), "Number out of range",
			fmt.Sprintf("The value of %q is too large.", name))
		return false
	}
	*dst = f
	return true
}

// duration decodes a Go duration string such as "90s", "15m" or "1h30m".
// A negative duration parses here and is reported by the checks, which
// apply to hand-built policies too.
func (a *attrs) duration(name string, dst *time.Duration) bool {
	var s string
	if !a.str(name, &s) {
		return false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		a.fail(a.where(name), a.attrs[name].Expr.Range(), "Invalid duration",
			fmt.Sprintf("The value of %q must be a duration such as \"90s\", \"15m\" or \"1h30m\", not %q.", name, s))
		return false
	}
	*dst = d
	return true
}

// signal decodes a signal name into its canonical form ("usr1" becomes
// "SIGUSR1", "none" becomes ""). An unknown name is kept as written for the
// checks to report with a suggestion.
func (a *attrs) signal(name string, dst *string) bool {
	var s string
	if !a.str(name, &s) {
		return false
	}
	if norm, err := NormalizeSignal(s); err == nil {
		s = norm
	}
	*dst = s
	return true
}

// strings decodes a list of strings. The source map gets each element's own
// range so that a check can point at the one bad name in a list. An empty
// list decodes to nil, the same as an absent one.
func (a *attrs) strings(name string, dst *[]string) bool {
	v, ok := a.value(name, cty.List(cty.String), "a list of strings")
	if !ok {
		return false
	}
	w := a.where(name)
	expr := a.attrs[name].Expr
	elems, diags := hcl.ExprList(expr)
	if diags.HasErrors() || len(elems) != v.LengthInt() {
		elems = nil // not a literal list; every element points at the whole value
	}
	var out []string
	for i, ev := range v.AsValueSlice() {
		r := expr.Range()
		if elems != nil {
			r = elems[i].Range()
		}
		a.src.subject[w.at(i)] = r
		if ev.IsNull() {
			a.fail(w.at(i), r, "Invalid null value",
				fmt.Sprintf("The elements of %q must be strings, not null.", name))
			out = append(out, "") // keep indexes lined up with the source
			continue
		}
		out = append(out, ev.AsString())
	}
	*dst = out
	return true
}

// stringMap decodes a map of strings (an HCL object such as
// { Authorization = "ENV" }). An empty map decodes to nil.
func (a *attrs) stringMap(name string, dst *map[string]string) bool {
	v, ok := a.value(name, cty.Map(cty.String), "a map of strings")
	if !ok {
		return false
	}
	out := map[string]string{}
	for k, ev := range v.AsValueMap() {
		if ev.IsNull() {
			a.fail(a.where(name), a.attrs[name].Expr.Range(), "Invalid null value",
				fmt.Sprintf("The values of %q must be strings, not null.", name))
			return false
		}
		out[k] = ev.AsString()
	}
	if len(out) == 0 {
		out = nil
	}
	*dst = out
	return true
}
