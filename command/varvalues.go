package command

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// variableValues joins -var-file contents and -var KEY=VALUE pairs into
// the variables file Nomad's parse endpoint takes. As in the nomad CLI, a
// later value of a variable wins: a later file over an earlier one, and
// -var over every file. (Nomad's endpoint refuses a name set twice, so
// each is written once, with its last value.)
func variableValues(vars, files []string) (string, error) {
	var order []string
	vals := map[string]string{} // name → HCL expression source
	set := func(k, expr string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = expr
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read -var-file: %w", err)
		}
		file, diags := hclsyntax.ParseConfig(src, f, hcl.InitialPos)
		if diags.HasErrors() {
			return "", fmt.Errorf("-var-file: %w", diags)
		}
		body, ok := file.Body.(*hclsyntax.Body)
		if !ok {
			return "", fmt.Errorf("-var-file %s: not HCL", f)
		}
		if len(body.Blocks) > 0 {
			r := body.Blocks[0].DefRange()
			return "", fmt.Errorf("-var-file %s: a block (%s) where only variable values (name = value) may be", r.String(), body.Blocks[0].Type)
		}
		attrs := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
		for _, a := range body.Attributes {
			attrs = append(attrs, a)
		}
		sort.Slice(attrs, func(i, j int) bool { return attrs[i].SrcRange.Start.Byte < attrs[j].SrcRange.Start.Byte })
		for _, a := range attrs {
			r := a.Expr.Range()
			set(a.Name, string(src[r.Start.Byte:r.End.Byte]))
		}
	}
	for _, v := range vars {
		k, val, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return "", fmt.Errorf("-var %q: want KEY=VALUE", v)
		}
		// A quoted string converts to the variable's declared type
		// (number, bool) as Nomad's own -var does; the value is literal:
		// no ${...} or %{...} in it is evaluated.
		quoted := strconv.Quote(val)
		quoted = strings.NewReplacer("${", "$${", "%{", "%%{").Replace(quoted)
		set(strings.TrimSpace(k), quoted)
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "%s = %s\n", k, vals[k])
	}
	return b.String(), nil
}
