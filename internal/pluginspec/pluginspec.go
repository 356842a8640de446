// Package pluginspec builds the schemas of the plugins' agent config blocks
// (plugin "steward-gpu" and plugin "steward-exec" { config { } }), which
// Nomad decodes with them before it hands the plugin its msgpack.
package pluginspec

import "github.com/hashicorp/nomad/plugins/shared/hclspec"

// Optional is an attribute the operator may leave out: of HCL type typ,
// defaulting to def, an HCL literal (`"1m"`, `true`, `[]`).
func Optional(name, typ, def string) *hclspec.Spec {
	return hclspec.NewDefault(hclspec.NewAttr(name, typ, false), hclspec.NewLiteral(def))
}
