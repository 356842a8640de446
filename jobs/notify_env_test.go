package jobs

import (
	"maps"
	"strings"
	"testing"

	dep "github.com/hashicorp/consul-template/dependency"
	"github.com/hashicorp/consul-template/template"
	envparse "github.com/hashicorp/go-envparse"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
)

// notifyEnvPath is the Nomad variable the controller job renders into its
// environment: its own job, group and task, which its workload identity
// reads without a rule.
const notifyEnvPath = "nomad/jobs/steward-controller/controller/controller"

// controllerTemplate returns the attributes of the controller task's
// template whose destination is dest, from the shipped jobspec.
func controllerTemplate(t *testing.T, dest string) map[string]string {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(Controller), "steward-controller.nomad.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var found map[string]string
	var walk func(b *hclsyntax.Body, path []string)
	walk = func(b *hclsyntax.Body, path []string) {
		for _, blk := range b.Blocks {
			p := append(append([]string{}, path...), blk.Type)
			if strings.Join(p, "/") != "job/group/task/template" {
				walk(blk.Body, p)
				continue
			}
			attrs := map[string]string{}
			for name, a := range blk.Body.Attributes {
				v, diags := a.Expr.Value(nil)
				if diags.HasErrors() {
					t.Fatalf("template %s: %v", name, diags)
				}
				if v.Type().FriendlyName() == "bool" {
					attrs[name] = map[bool]string{true: "true", false: "false"}[v.True()]
					continue
				}
				attrs[name] = v.AsString()
			}
			if attrs["destination"] == dest {
				found = attrs
			}
		}
	}
	walk(f.Body.(*hclsyntax.Body), nil)
	if found == nil {
		t.Fatalf("the controller job has no template with destination %q", dest)
	}
	return found
}

// TestControllerNotifyEnvTemplate renders the shipped job's notify
// secrets template with consul-template, as Nomad's client does, against
// each story's Nomad variable, and parses the result as Nomad parses an
// env template (go-envparse).
func TestControllerNotifyEnvTemplate(t *testing.T) {
	tmpl := controllerTemplate(t, "secrets/notify.env")
	if tmpl["env"] != "true" || tmpl["change_mode"] != "restart" || tmpl["perms"] != "0400" {
		t.Fatalf("the notify template: env %s, change_mode %s, perms %s; want true, restart (an environment is read at start), 0400",
			tmpl["env"], tmpl["change_mode"], tmpl["perms"])
	}
	tricky := "a \"quoted\" \\back\\slash\nsecond line\r\n\ttab $HOME ${NOMAD_TASK_DIR} $$ a=b== # not a comment 'single' <&> é 😀 \x01"
	cases := []struct {
		name string
		// exists: the variable is there, with items; else there is none.
		exists bool
		items  map[string]string
		// others are variables under the same prefix, another job's task.
		others []string
		want   map[string]string
	}{
		{name: "no variable: nothing, and nothing waited for", want: map[string]string{}},
		{name: "an empty variable", exists: true, items: map[string]string{}, want: map[string]string{}},
		{name: "a URL and a token", exists: true,
			items: map[string]string{"STEWARD_HOOK_URL": "https://hooks.example.com/T0/B0/x?a=b&c=d", "HOOK_AUTH": "Bearer s3cr=t"},
			want:  map[string]string{"STEWARD_HOOK_URL": "https://hooks.example.com/T0/B0/x?a=b&c=d", "HOOK_AUTH": "Bearer s3cr=t"}},
		{name: "quotes, backslashes, newlines, $ and = arrive byte for byte", exists: true,
			items: map[string]string{"TRICKY": tricky, "EMPTY": "", "SPACES": "  padded  ", "_lower9": "x"},
			want:  map[string]string{"TRICKY": tricky, "EMPTY": "", "SPACES": "  padded  ", "_lower9": "x"}},
		{name: "names that are not environment names are skipped, never renamed", exists: true,
			items: map[string]string{"hook-auth": "a", "hook.url": "b", "9LIVES": "c", "A B": "d", "x\"=y": "e", "OK": "f", "": "g"},
			want:  map[string]string{"OK": "f", "STEWARD_NOTIFY_ENV_SKIPPED": `"" "9LIVES" "A B" "hook-auth" "hook.url" "x\"=y"`}},
		{name: "Nomad's own names are not replaced", exists: true,
			items: map[string]string{"NOMAD_ADDR": "http://evil:4646", "NOMAD_TASK_DIR": "/tmp", "NOMADIC": "yes"},
			want:  map[string]string{"NOMADIC": "yes", "STEWARD_NOTIFY_ENV_SKIPPED": `"NOMAD_ADDR" "NOMAD_TASK_DIR"`}},
		{name: "a NUL byte, which no environment carries, is skipped", exists: true,
			items: map[string]string{"NUL": "a\x00b", "FINE": "ok"},
			want:  map[string]string{"FINE": "ok", "STEWARD_NOTIFY_ENV_SKIPPED": `"NUL"`}},
		{name: "the skipped list cannot be forged by an item", exists: true,
			items: map[string]string{"STEWARD_NOTIFY_ENV_SKIPPED": "nothing"},
			want:  map[string]string{"STEWARD_NOTIFY_ENV_SKIPPED": `"STEWARD_NOTIFY_ENV_SKIPPED"`}},
		{name: "another task's variable under the same prefix is not read",
			others: []string{notifyEnvPath + "-other"}, want: map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			brain := template.NewBrain()
			list, err := dep.NewNVListQuery("default", notifyEnvPath)
			if err != nil {
				t.Fatal(err)
			}
			var metas []*dep.NomadVarMeta
			remember := func(path string, items map[string]string) {
				v := dep.NewNomadVariable(&api.Variable{Namespace: "default", Path: path, Items: items})
				metas = append(metas, v.Metadata())
				get, err := dep.NewNVGetQuery("default", path)
				if err != nil {
					t.Fatal(err)
				}
				get.EnableBlocking() // as nomadVar asks
				brain.Remember(get, &v.Items)
			}
			if tc.exists {
				remember(notifyEnvPath, tc.items)
			}
			for _, o := range tc.others {
				remember(o, map[string]string{"OTHER": "x"})
			}
			brain.Remember(list, metas)

			tp, err := template.NewTemplate(&template.NewTemplateInput{Contents: tmpl["data"]})
			if err != nil {
				t.Fatal(err)
			}
			res, err := tp.Execute(&template.ExecuteInput{Brain: brain})
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if n := res.Missing.Len(); n != 0 {
				t.Fatalf("the template waits for %d dependencies (%v): the task would not start", n, res.Missing.String())
			}
			got, err := envparse.Parse(strings.NewReader(string(res.Output)))
			if err != nil {
				t.Fatalf("Nomad would refuse the rendered file: %v\n%s", err, res.Output)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("environment:\n got %q\nwant %q\nrendered:\n%s", got, tc.want, res.Output)
			}
		})
	}
}
