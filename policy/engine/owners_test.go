package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// TestMethodsPerType keeps the engine's state split among owners
// (docs/design.md, "Who owns what inside a plan"): no type above 40
// methods, state included (it had 49 before the earmarks' writers went to
// the output and their moves to the model, the pool-precedence placements
// to the model, and the set and capacity queries to the index). A type
// that outgrows its bound wants an owner of its own.
func TestMethodsPerType(t *testing.T) {
	const most = 40
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatalf("parse the engine: %v", err)
	}
	count := map[string]int{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil {
					continue
				}
				typ := fd.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					count[id.Name]++
				}
			}
		}
	}
	if count["state"] == 0 || count["model"] == 0 {
		t.Fatalf("found no methods of state or model: %v", count)
	}
	biggest := ""
	for typ, n := range count {
		if n > most {
			t.Errorf("type %s has %d methods, at most %d: give part of it an owner", typ, n, most)
		}
		if n > count[biggest] || n == count[biggest] && typ < biggest {
			biggest = typ
		}
	}
	t.Logf("the most methods: %s (%d), state %d, at most %d", biggest, count[biggest], count["state"], most)
}

// TestFunctionLength keeps every engine function within 80 lines (issue
// 32: one demand's walk readable function by function); buildUnits,
// serve, buildChains and placeOne were split to meet it.
func TestFunctionLength(t *testing.T) {
	const most = 80
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatalf("parse the engine: %v", err)
	}
	longestName, longest := "", 0
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				if n > most {
					t.Errorf("%s: %s is %d lines, at most %d", fset.Position(fd.Pos()), fd.Name.Name, n, most)
				}
				if n > longest || n == longest && fd.Name.Name < longestName {
					longestName, longest = fd.Name.Name, n
				}
			}
		}
	}
	t.Logf("the longest function: %s (%d lines), at most %d", longestName, longest, most)
}
