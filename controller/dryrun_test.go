package controller

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestDryRunWrites: a dry run's Nomad refuses every write, and the
// cluster sees none of them; reads go through.
func TestDryRunWrites(t *testing.T) {
	ctx := context.Background()
	f := newFakeNomad()
	n := dryNomad{f}
	writes := []struct {
		name string
		call func() error
	}{
		{"signal", func() error { return n.Signal(ctx, "ml", "a1", "work", "SIGUSR1") }},
		{"stop", func() error { _, err := n.StopAlloc(ctx, "ml", "a1"); return err }},
		{"scale", func() error { _, err := n.Scale(ctx, "ml", "train", "work", 0, "m", nil, 0); return err }},
		{"scale ahead", func() error { _, err := n.ScaleAhead(ctx, "ml", "train", "work", 1, 0); return err }},
		{"scale with policy", func() error {
			_, err := n.ScaleWithPolicy(ctx, "ml", "train", "work", 1, ScalingPolicy{}, "m", nil, 0, 0)
			return err
		}},
		{"priority", func() error { _, err := n.SetPriority(ctx, "ml", "train", 40, "r", 0); return err }},
		{"move", func() error { _, err := n.MoveJob(ctx, "ml", "train", "spot", "r", 0); return err }},
		{"put", func() error { _, err := n.PutVar(ctx, "ml", "p", map[string]string{"k": "v"}, false, 0); return err }},
		{"delete", func() error { return n.DeleteVar(ctx, "ml", "p", 0) }},
		{"register", func() error {
			return n.RegisterJob(ctx, &api.Job{ID: ptr("steward-hold-1"), Namespace: ptr("steward")})
		}},
		{"purge", func() error { return n.PurgeJob(ctx, "steward", "steward-hold-1") }},
	}
	for _, w := range writes {
		if err := w.call(); !errors.Is(err, errDryRun) {
			t.Errorf("%s: err %v, want refused as a dry run", w.name, err)
		}
	}
	if len(f.calls) > 0 {
		t.Errorf("a dry run wrote to Nomad: %v", f.calls)
	}
	if _, _, err := n.GetVar(ctx, "ml", "p"); err != nil {
		t.Errorf("read refused: %v", err)
	}
}

// TestDryRunRefusesWhatTheFenceDoes: every write the lease's fence
// guards, a dry run refuses: a write added to Nomad and fenced is not
// let through a dry run by forgetting it here.
func TestDryRunRefusesWhatTheFenceDoes(t *testing.T) {
	fset := token.NewFileSet()
	methods := map[string][]string{}
	for _, file := range []string{"fence.go", "dryrun.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok {
				methods[id.Name] = append(methods[id.Name], fd.Name.Name)
			}
		}
	}
	fenced, dry := methods["fencedNomad"], methods["dryNomad"]
	slices.Sort(fenced)
	slices.Sort(dry)
	if len(fenced) == 0 || !slices.Equal(fenced, dry) {
		t.Errorf("the fence guards %v, a dry run refuses %v: the same writes", fenced, dry)
	}
}
