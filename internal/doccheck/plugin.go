package doccheck

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	hclv1 "github.com/hashicorp/hcl"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/nomad/structs/config"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/zclconf/go-cty/cty/msgpack"

	"github.com/gpu-steward/steward/devices"
	"github.com/gpu-steward/steward/driver"
)

// stewardPlugins are the plugins whose agent plugin blocks the checker can
// check: a fresh, unconfigured instance of each, and a function that ends
// it.
var stewardPlugins = map[string]func() (base.BasePlugin, func()){
	devices.PluginName: func() (base.BasePlugin, func()) { return devices.New(hclog.NewNullLogger()), func() {} },
	driver.PluginName: func() (base.BasePlugin, func()) {
		d := driver.New(hclog.NewNullLogger())
		return d, d.Shutdown
	},
}

// checkPlugins checks agent plugin blocks as the Nomad agent does: the
// agent's HCL1 config parser reads the block, the plugin's config schema
// decodes its config (unknown or mistyped options fail), and the plugin's
// SetConfig judges the values, as Nomad's plugin loader does before it
// starts the plugin.
func (c *Checker) checkPlugins(ex Example) error {
	var agent struct {
		Plugins []*config.PluginConfig `hcl:"plugin"`
	}
	if err := hclv1.Decode(&agent, padded(ex, "")); err != nil {
		return fmt.Errorf("the Nomad agent's config parser rejects it: %w", err)
	}
	var problems []string
	for _, p := range agent.Plugins {
		if err := c.checkPlugin(p); err != nil {
			problems = append(problems, fmt.Sprintf("plugin %q: %v", p.Name, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}

func (c *Checker) checkPlugin(p *config.PluginConfig) error {
	if len(p.ExtraKeysHCL) > 0 {
		return fmt.Errorf("unknown keys in the plugin block: %s", strings.Join(p.ExtraKeysHCL, ", "))
	}
	newPlugin, ok := stewardPlugins[p.Name]
	if !ok {
		return fmt.Errorf("not one of Steward's plugins: the checker cannot check its config")
	}
	plugin, end := newPlugin()
	defer end()
	schema, err := plugin.ConfigSchema()
	if err != nil {
		return fmt.Errorf("reading its config schema: %w", err)
	}
	spec, diags := hclspecutils.Convert(schema)
	if diags.HasErrors() {
		return fmt.Errorf("converting its config schema: %w", diags)
	}
	var cfg interface{} = map[string]interface{}{}
	if p.Config != nil {
		cfg = c.underTempDir(p.Config)
	}
	val, diags, _ := hclutils.ParseHclInterface(cfg, spec, nil)
	if diags.HasErrors() {
		return fmt.Errorf("config does not fit the plugin's schema: %w", diags)
	}
	data, err := msgpack.Marshal(val, val.Type())
	if err != nil {
		return fmt.Errorf("encoding its config: %w", err)
	}
	if err := plugin.SetConfig(&base.Config{PluginConfig: data}); err != nil {
		return fmt.Errorf("the plugin refuses its config: %w", err)
	}
	return nil
}

// underTempDir copies a config value with absolute paths moved under the
// checker's temp dir, where SetConfig may create them.
func (c *Checker) underTempDir(v interface{}) interface{} {
	switch v := v.(type) {
	case string:
		if filepath.IsAbs(v) {
			return filepath.Join(c.TempDir, v)
		}
	case map[string]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, x := range v {
			out[k] = c.underTempDir(x)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, x := range v {
			out[i] = c.underTempDir(x)
		}
		return out
	case []map[string]interface{}:
		out := make([]interface{}, len(v))
		for i, x := range v {
			out[i] = c.underTempDir(x)
		}
		return out
	}
	return v
}
