package command

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	envparse "github.com/hashicorp/go-envparse"
	"github.com/hashicorp/nomad/api"

	"github.com/gpu-steward/steward/controller"
	"github.com/gpu-steward/steward/policy"
)

// maxNotifyEnvFile bounds -notify-env-file: a Nomad variable holds at most
// 64 KiB.
const maxNotifyEnvFile = 64 << 10

// readNotifyEnvFile reads -notify-env-file: KEY=VALUE lines, read as Nomad
// reads an env template (go-envparse: "..." with \n, \" and \\ escapes,
// '...' as written, # comments). Every item must be one the controller job
// passes to its task: a name it would skip is an error here, with the
// name, never the value.
func readNotifyEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read -notify-env-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxNotifyEnvFile+1))
	if err != nil {
		return nil, fmt.Errorf("read -notify-env-file %s: %w", path, err)
	}
	if len(b) > maxNotifyEnvFile {
		return nil, fmt.Errorf("-notify-env-file %s: more than %d bytes, the most a Nomad variable holds", path, maxNotifyEnvFile)
	}
	items, err := envparse.Parse(bytes.NewReader(b))
	if err != nil {
		// envparse's errors name the line, not the value.
		return nil, fmt.Errorf("-notify-env-file %s: %w", path, err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("-notify-env-file %s: no KEY=VALUE lines", path)
	}
	for _, k := range slices.Sorted(maps.Keys(items)) {
		if err := controller.CheckNotifyEnvItem(k, items[k]); err != nil {
			return nil, fmt.Errorf("-notify-env-file %s: %w", path, err)
		}
	}
	return items, nil
}

// notifyEnvNeeds lists the environment variables a policy's notify
// blocks read (url_env, headers_from_env) that items lacks.
func notifyEnvNeeds(policyText string, items map[string]string) []string {
	if policyText == "" {
		return nil
	}
	p, diags := policy.NewParser().ParseSources(policy.Source{Name: "policy", Bytes: []byte(policyText)})
	if p == nil || diags.HasErrors() {
		return nil
	}
	var lack []string
	for _, nb := range p.Notify {
		names := []string{nb.URLEnv}
		names = append(names, slices.Collect(maps.Values(nb.HeadersFromEnv))...)
		for _, n := range names {
			if _, ok := items[n]; n != "" && !ok && !slices.Contains(lack, n) {
				lack = append(lack, n)
			}
		}
	}
	slices.Sort(lack)
	return lack
}

// notifyEnvVariable writes the notify secrets variable from
// -notify-env-file: exactly the file's items (check-and-set against what
// was read). Without the flag a variable there is kept, and none is not an
// error: a policy without url_env or headers_from_env needs none. Only
// names are printed, never values.
func (s *setup) notifyEnvVariable(*api.Job) (setupStep, error) {
	what := fmt.Sprintf("notify secrets variable %s in namespace %s", controller.NotifyEnvVariable, s.ns)
	v, _, err := s.client.Variables().Read(controller.NotifyEnvVariable, &api.QueryOptions{Namespace: s.ns})
	exists := err == nil && v != nil
	if err != nil && !isNotFound(err) {
		return setupStep{}, fmt.Errorf("read %s: %w", what, err)
	}
	if s.notifyEnv == nil {
		if !exists {
			return setupStep{What: what, State: "skipped", Detail: "none (no -notify-env-file given; the policy's url_env and headers_from_env need it)"}, nil
		}
		return s.result(what, true, true, "kept (no -notify-env-file given): "+strings.Join(slices.Sorted(maps.Keys(v.Items)), ", ")), nil
	}
	same := exists && maps.Equal(v.Items, s.notifyEnv)
	if s.apply && !same {
		nv := &api.Variable{Namespace: s.ns, Path: controller.NotifyEnvVariable, Items: s.notifyEnv}
		if exists {
			nv.ModifyIndex = v.ModifyIndex
		}
		if _, _, err := s.client.Variables().CheckedUpdate(nv, &api.WriteOptions{Namespace: s.ns}); err != nil {
			return setupStep{}, fmt.Errorf("write %s: %w", what, err)
		}
	}
	detail := fmt.Sprintf("%s from %s (values not shown)", strings.Join(slices.Sorted(maps.Keys(s.notifyEnv)), ", "), s.notifyEnvFile)
	if lack := notifyEnvNeeds(s.policyText, s.notifyEnv); len(lack) > 0 {
		detail += "; the policy also reads " + strings.Join(lack, ", ") + ", which it lacks"
	}
	return s.result(what, exists, same, detail), nil
}
