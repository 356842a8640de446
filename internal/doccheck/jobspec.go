package doccheck

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/drivers/rawexec"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/jobspec2"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"

	"github.com/gpu-steward/steward/driver"
)

// Wrappers that make a jobspec fragment a job, on as many lines as they
// have newlines (see padded). A task's blocks get a task with a valid
// raw_exec config around them.
var jobWrappers = map[Kind][2]string{
	KindJob:      {"", ""},
	KindGroup:    {"job \"docs-example\" {\n", "}\n"},
	KindTask:     {"job \"docs-example\" {\ngroup \"example\" {\n", "}\n}\n"},
	KindTaskPart: {"job \"docs-example\" {\ngroup \"example\" {\ntask \"example\" {\ndriver = \"raw_exec\"\nconfig {\ncommand = \"true\"\n}\n", "}\n}\n}\n"},
}

// taskConfigSchemas are the task config schemas of the drivers whose
// config an example's tasks are checked against, as the Nomad client
// checks them when it starts a task.
var taskConfigSchemas = map[string]func() (*hclspec.Spec, error){
	driver.PluginName: func() (*hclspec.Spec, error) {
		d := driver.New(hclog.NewNullLogger())
		defer d.Shutdown()
		return d.TaskConfigSchema()
	},
	"raw_exec": func() (*hclspec.Spec, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		return rawexec.NewRawExecDriver(ctx, hclog.NewNullLogger()).TaskConfigSchema()
	},
}

// checkJob parses a jobspec example with Nomad's own HCL2 jobspec parser,
// strictly and offline, as `nomad job validate` and `nomad job run` do on
// the client side (variables take their defaults), and checks each task's
// config against its driver's schema where the checker knows the driver.
func (c *Checker) checkJob(ex Example, kind Kind) error {
	wrap := jobWrappers[kind]
	src := padded(ex, wrap[0]) + wrap[1]
	job, err := jobspec2.ParseWithConfig(&jobspec2.ParseConfig{
		Path:    ex.File,
		BaseDir: filepath.Join(c.Root, filepath.Dir(ex.File)),
		Body:    []byte(src),
		AllowFS: true,
		Strict:  true,
	})
	if err != nil {
		return fmt.Errorf("Nomad's jobspec parser rejects it: %w", err)
	}
	job.Canonicalize()
	var problems []string
	for _, g := range job.TaskGroups {
		for _, t := range g.Tasks {
			if err := checkTaskConfig(t); err != nil {
				problems = append(problems, fmt.Sprintf("group %q task %q: %v", *g.Name, t.Name, err))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}

// checkTaskConfig decodes a task's config block with its driver's schema
// when the checker knows the driver. Interpolations (${NOMAD_TASK_DIR})
// are made literal: they are filled in only on the client, and the schema
// is about names and types.
func checkTaskConfig(t *api.Task) error {
	schema, ok := taskConfigSchemas[t.Driver]
	if !ok {
		return nil
	}
	spec, err := schema()
	if err != nil {
		return fmt.Errorf("driver %s: reading its task config schema: %w", t.Driver, err)
	}
	hspec, diags := hclspecutils.Convert(spec)
	if diags.HasErrors() {
		return fmt.Errorf("driver %s: converting its task config schema: %w", t.Driver, diags)
	}
	if _, diags, _ := hclutils.ParseHclInterface(literal(t.Config), hspec, nil); diags.HasErrors() {
		return fmt.Errorf("config does not fit the %s driver's schema: %w", t.Driver, diags)
	}
	return nil
}

// literal copies a config value with its template sequences escaped.
func literal(v interface{}) interface{} {
	switch v := v.(type) {
	case string:
		return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(v)
	case map[string]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, x := range v {
			out[k] = literal(x)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, x := range v {
			out[i] = literal(x)
		}
		return out
	case []map[string]interface{}:
		out := make([]interface{}, len(v))
		for i, x := range v {
			out[i] = literal(x)
		}
		return out
	}
	return v
}
