package command

import (
	"bytes"
	"flag"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/gpu-steward/steward/policy"
)

// The controller's configuration file (-config FILE, issue 34 item 3), as
// the Nomad Autoscaler takes one: the controller's flags in HCL, grouped
// into blocks. Each attribute is one flag, so the file means exactly what
// the flag means and says nothing a flag could not; a flag given on the
// command line wins over the file. Mistakes are reported at their
// file:line,col, as in policy files.

// configAttr is one attribute of the file and the flag it sets.
type configAttr struct {
	name, flag string
	kind       configKind
}

type configKind int

const (
	kindString configKind = iota
	kindBool
	kindDuration
	kindInt
	kindFloat
	kindList // a repeatable flag: each element sets it once
)

// configSchema is the file: attributes at the top and in each block.
var configSchema = map[string][]configAttr{
	"": {
		{"policy", "policy", kindList},
		{"controller_pools", "controller-pool", kindList},
		{"dry_run", "dry-run", kindBool},
		{"id", "id", kindString},
		{"log_level", "log-level", kindString},
		{"log_json", "log-json", kindBool},
		{"resync", "resync", kindDuration},
		{"stats_interval", "stats-interval", kindDuration},
		{"round_timeout", "round-timeout", kindDuration},
		{"act_in_flight", "act-in-flight", kindInt},
		{"placeholder_image", "placeholder-image", kindString},
		{"ui_url", "ui-url", kindString},
	},
	"nomad": {
		{"address", "address", kindString},
		{"region", "region", kindString},
		{"token_file", "token-file", kindString},
		{"ca_cert", "ca-cert", kindString},
		{"ca_path", "ca-path", kindString},
		{"client_cert", "client-cert", kindString},
		{"client_key", "client-key", kindString},
		{"tls_server_name", "tls-server-name", kindString},
		{"skip_verify", "tls-skip-verify", kindBool},
		{"timeout", "nomad-timeout", kindDuration},
	},
	"telemetry": {
		{"listen", "listen", kindString},
		{"pprof", "pprof", kindBool},
	},
	"check": {
		{"listen", "check-listen", kindString},
		{"advertise", "advertise", kindString},
		{"tls_cert", "tls-cert", kindString},
		{"tls_key", "tls-key", kindString},
		{"concurrency", "check-concurrency", kindInt},
		{"rate", "check-rate", kindFloat},
		{"burst", "check-burst", kindInt},
	},
	"high_availability": {
		{"election", "election", kindString},
		{"lock_ttl", "lock-ttl", kindDuration},
		{"lock_delay", "lock-delay", kindDuration},
		{"consul_address", "consul-address", kindString},
		{"consul_lock_key", "consul-lock-key", kindString},
	},
	"activity": {
		{"source", "activity-source", kindString},
		{"max_age", "activity-max-age", kindDuration},
		{"prometheus_address", "prometheus-address", kindString},
		{"prometheus_query", "prometheus-query", kindString},
		{"prometheus_uuid_label", "prometheus-uuid-label", kindString},
	},
	"state": {
		{"namespace", "state-namespace", kindString},
		{"job_records", "job-records", kindBool},
	},
}

// configBlocks are the file's blocks, in the order they are read.
var configBlocks = []string{"nomad", "telemetry", "check", "high_availability", "activity", "state"}

// flagValue is one flag the file sets.
type flagValue struct {
	flag, value string
	at          hcl.Range
}

// readControllerConfig reads the file into the flags it sets, in file
// order, or the diagnostics of every mistake.
func readControllerConfig(path string) ([]flagValue, *hclparse.Parser, hcl.Diagnostics) {
	p := hclparse.NewParser()
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, p, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Failed to read the configuration file",
			Detail: fmt.Sprintf("The controller's configuration file %q could not be read: %v.", path, err)}}
	}
	f, diags := p.ParseHCL(src, path)
	if diags.HasErrors() {
		return nil, p, diags
	}
	root := hcl.BodySchema{}
	for _, a := range configSchema[""] {
		root.Attributes = append(root.Attributes, hcl.AttributeSchema{Name: a.name})
	}
	for _, b := range configBlocks {
		root.Blocks = append(root.Blocks, hcl.BlockHeaderSchema{Type: b})
	}
	content, d := f.Body.Content(&root)
	diags = append(diags, d...)
	var out []flagValue
	out = append(out, attrFlags(content.Attributes, configSchema[""], &diags)...)
	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		if first, dup := seen[b.Type]; dup {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate " + b.Type + " block",
				Detail: fmt.Sprintf("A %s block is already defined at %s.", b.Type, first), Subject: b.DefRange.Ptr()})
			continue
		}
		seen[b.Type] = b.DefRange
		schema := hcl.BodySchema{}
		for _, a := range configSchema[b.Type] {
			schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: a.name})
		}
		bc, d := b.Body.Content(&schema)
		diags = append(diags, d...)
		out = append(out, attrFlags(bc.Attributes, configSchema[b.Type], &diags)...)
	}
	return out, p, diags
}

// attrFlags turns a body's attributes into flag values, in source order.
func attrFlags(attrs hcl.Attributes, schema []configAttr, diags *hcl.Diagnostics) []flagValue {
	var out []flagValue
	for _, ca := range schema {
		attr, ok := attrs[ca.name]
		if !ok {
			continue
		}
		v, d := attr.Expr.Value(nil) // no variables, no functions: literal values
		*diags = append(*diags, d...)
		if d.HasErrors() {
			continue
		}
		bad := func(want string) {
			*diags = append(*diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid " + ca.name,
				Detail: fmt.Sprintf("%s must be %s (flag -%s).", ca.name, want, ca.flag), Subject: attr.Expr.Range().Ptr()})
		}
		if v.IsNull() || !v.IsWhollyKnown() {
			bad("set")
			continue
		}
		switch ca.kind {
		case kindList:
			if !v.Type().IsTupleType() && !v.Type().IsListType() {
				bad("a list of strings")
				continue
			}
			for it := v.ElementIterator(); it.Next(); {
				_, e := it.Element()
				if e.IsNull() || e.Type() != cty.String {
					bad("a list of strings")
					break
				}
				out = append(out, flagValue{ca.flag, e.AsString(), attr.Expr.Range()})
			}
		case kindBool:
			if v.Type() != cty.Bool {
				bad("true or false")
				continue
			}
			out = append(out, flagValue{ca.flag, strconv.FormatBool(v.True()), attr.Expr.Range()})
		case kindInt, kindFloat:
			if v.Type() != cty.Number {
				bad("a number")
				continue
			}
			bf := v.AsBigFloat()
			if ca.kind == kindInt {
				if !bf.IsInt() {
					bad("a whole number")
					continue
				}
				i, _ := bf.Int(new(big.Int))
				out = append(out, flagValue{ca.flag, i.String(), attr.Expr.Range()})
				continue
			}
			f, _ := bf.Float64()
			out = append(out, flagValue{ca.flag, strconv.FormatFloat(f, 'g', -1, 64), attr.Expr.Range()})
		case kindDuration:
			if v.Type() != cty.String {
				bad(`a duration such as "30s"`)
				continue
			}
			if _, err := time.ParseDuration(v.AsString()); err != nil {
				bad(fmt.Sprintf(`a duration such as "30s" (%v)`, err))
				continue
			}
			out = append(out, flagValue{ca.flag, v.AsString(), attr.Expr.Range()})
		default:
			if v.Type() != cty.String {
				bad("a string")
				continue
			}
			out = append(out, flagValue{ca.flag, v.AsString(), attr.Expr.Range()})
		}
	}
	return out
}

// applyControllerConfig sets, from the file at path, every flag the
// command line did not give (explicit), and returns the diagnostics
// written as policy files' are ("" when there are none).
func applyControllerConfig(fs *flag.FlagSet, path string, explicit map[string]bool) (string, bool) {
	values, p, diags := readControllerConfig(path)
	for _, v := range values {
		if explicit[v.flag] {
			continue
		}
		if err := fs.Set(v.flag, v.value); err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid value",
				Detail: fmt.Sprintf("-%s %q: %v.", v.flag, v.value, err), Subject: v.at.Ptr()})
		}
	}
	if len(diags) == 0 {
		return "", true
	}
	var buf bytes.Buffer
	if err := policy.WriteDiagnostics(&buf, p.Files(), diags); err != nil {
		return err.Error(), false
	}
	return buf.String(), !diags.HasErrors()
}
