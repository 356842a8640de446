package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strconv"
	"strings"
	"testing"
)

// TestShape keeps the controller from growing back into one hub
// (issue 32): a round reads as its phases (phases.go), no function is
// longer than 80 lines, and a dry run is decided in a few named places,
// not checked in every step (dryPhases, dryNomad). The Controller's
// methods and fields may not grow: a new duty wants a type of its own
// (publisher, elector, sampler, drainer, endpoints, writeBackoff), and no
// other type may grow past typeMethodsMax. Lower a bound when you shorten
// something; never raise one.
func TestShape(t *testing.T) {
	const (
		longest    = 80
		methodsMax = 36 // Controller's methods: 166 before the phases, 181 after; 99 once publishing, leading, sampling, drains, the endpoints and the backoff were types of their own; 38 once the store, actor, placeholders, fair sharer, meta checker and requester were too; 37 once unfenced moved to the wiring; 36 once the recent decisions were a type; 34 once poke and the crash point were the wakeup's and crashAt's
		fieldsMax  = 32 // Controller's fields (51 before those types, 36 before the second six, 35 before the wiring was one, 34 before the store and the fair sharer owned the states and the fair-share usage)
		// typeMethodsMax bounds every other type's methods: none is to
		// become the next hub (40 before the publisher's outbox and
		// forecaster and the actor's pool holds were types of their own).
		typeMethodsMax = 30
		dryRunMax      = 10 // uses of cfg.DryRun (17 in 6 files before the phases)
	)
	// backPointers are the types that may hold the whole controller: the
	// round's phases, which are the controller's round. Every other type,
	// the publisher too, is given the wiring and what it uses.
	backPointers := map[string]bool{"dryPhases": true, "leaderPhases": true}
	// handedOn are the Controller's methods that may be handed on as
	// values, each with why: few, and never a new one without a reason.
	handedOn := map[string]string{
		"engineNow": "the policy and engine in force, which SIGHUP swaps under c.mu with the health and the last check: the owners read them through it (docs/design.md, \"Who owns what\")",
		"Health":    "the controller's exported answer, which the endpoints serve as /healthz",
		"Check":     "the controller's exported answer, which the endpoints serve as /v1/job/check",
		"lead":      "the elector runs the lead term within run's call while it holds the leadership, and keeps nothing of it",
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatalf("parse the controller: %v", err)
	}
	methods, dryRuns, over := 0, 0, 0
	for _, p := range pkgs {
		for _, esc := range controllerEscapes(p.Files) {
			if handedOn[esc.method] != "" {
				continue
			}
			t.Errorf("%s: %s is handed on (%s): give the owner what it uses, not a way back to the controller", fset.Position(esc.pos), esc.what, esc.how)
		}
	}
	byType, fieldsOf := map[string]int{}, map[string]int{}
	longestName, longestLines := "", 0
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					name := n.Name.Name
					if recv := receiverName(n); recv != "" {
						name = recv + "." + name
						byType[recv]++
						if recv == "Controller" {
							methods++
						}
					}
					lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
					if lines > longestLines {
						longestName, longestLines = name, lines
					}
					if lines > longest {
						over++
						t.Errorf("%s is %d lines, at most %d: split it by what it does", name, lines, longest)
					}
				case *ast.TypeSpec:
					if st, ok := n.Type.(*ast.StructType); ok {
						fieldsOf[n.Name.Name] = countFields(st)
						if holdsController(st) && !backPointers[n.Name.Name] {
							t.Errorf("%s holds the *Controller: give it the wiring and what it uses (wiring.go)", n.Name.Name)
						}
					}
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.SelectorExpr); ok && n.Sel.Name == "DryRun" && x.Sel.Name == "cfg" {
						dryRuns++ // c.cfg().DryRun
					} else if x, ok := n.X.(*ast.Ident); ok && n.Sel.Name == "DryRun" && x.Name == "cfg" {
						dryRuns++ // cfg.DryRun
					} else if x, ok := n.X.(*ast.CallExpr); ok && n.Sel.Name == "DryRun" && isCfgCall(x) {
						dryRuns++ // p.cfg().DryRun, through the wiring
					}
				}
				return true
			})
		}
	}
	fields := fieldsOf["Controller"]
	t.Logf("Controller: %d methods, %d fields; %d functions over %d lines, the longest %s (%d); cfg.DryRun read in %d places",
		methods, fields, over, longest, longestName, longestLines, dryRuns)
	if methods == 0 || fields == 0 {
		t.Fatalf("found no Controller: %d methods, %d fields", methods, fields)
	}
	if methods > methodsMax {
		t.Errorf("Controller has %d methods, at most %d: give the new duty a type of its own", methods, methodsMax)
	}
	if fields > fieldsMax {
		t.Errorf("Controller has %d fields, at most %d", fields, fieldsMax)
	}
	biggest, most := "", 0
	for typ, n := range byType {
		if typ != "Controller" && (n > most || n == most && typ < biggest) {
			biggest, most = typ, n
		}
		if typ != "Controller" && n > typeMethodsMax {
			t.Errorf("%s has %d methods, at most %d: split it by what it does", typ, n, typeMethodsMax)
		}
	}
	t.Logf("the largest other type: %s (%d methods)", biggest, most)
	for _, typ := range dutyTypes {
		t.Logf("%-13s %2d methods, %2d fields", typ, byType[typ], fieldsOf[typ])
	}
	if dryRuns > dryRunMax {
		t.Errorf("cfg.DryRun is read in %d places, at most %d: a dry run's round changes nothing by its phases (dryPhases) and its Nomad (dryNomad)", dryRuns, dryRunMax)
	}
}

// dutyTypes are the types that carry the controller's duties
// (giveDuties), whose sizes TestShape logs.
var dutyTypes = []string{"Controller", "publisher", "outbox", "forecaster", "elector", "sampler", "drainer", "endpoints",
	"stateStore", "actor", "poolHolds", "placeholders", "fairSharer", "metaChecker", "requester", "writeBackoff"}

// escape is a func literal that captures the Controller, or a method
// value bound to it, handed on: where it is, what and how.
type escape struct {
	pos    token.Pos
	what   string
	how    string
	method string // the Controller's method, for a bound method value
}

// controllerEscapes finds, in a package's files, what hands the
// Controller on (closuresOverController).
func controllerEscapes(files map[string]*ast.File) []escape {
	methods := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && receiverName(fd) == "Controller" {
				methods[fd.Name.Name] = true
			}
		}
	}
	var out []escape
	for _, f := range files {
		out = append(out, closuresOverController(f, methods)...)
	}
	return out
}

// closuresOverController finds the func literals, in functions with a
// *Controller receiver or parameter, that refer to it, and the method
// values bound to it (c.engineNow, one of methods, the Controller's own: not
// an owner's, c.pub.forgetRecords, nor one promoted from an embedded
// owner), that are stored
// (a composite literal's element or field, an assignment to a field) or
// passed to a function other than one that runs them at once (go, defer
// and a call of the literal itself are not handing on, nor is a call of
// the controller's own method, c.f(func...)). A closure held by
// an owner is a back-pointer that holdsController does not see. It reads
// names, not types: a local that shadows the controller's name is taken
// for it, which errs towards a report.
func closuresOverController(f *ast.File, methods map[string]bool) []escape {
	var out []escape
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		names := controllerNames(fd)
		if len(names) == 0 {
			continue
		}
		captures := func(fl *ast.FuncLit) bool {
			found := false
			ast.Inspect(fl.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && names[id.Name] {
					found = true
				}
				return !found
			})
			return found
		}
		flag := func(e ast.Expr, how string) {
			switch e := e.(type) {
			case *ast.FuncLit:
				if captures(e) {
					out = append(out, escape{pos: e.Pos(), what: "a func literal that captures the Controller", how: how})
				}
			case *ast.SelectorExpr:
				if id, ok := e.X.(*ast.Ident); ok && names[id.Name] && methods[e.Sel.Name] {
					out = append(out, escape{pos: e.Pos(), what: "the Controller's method " + id.Name + "." + e.Sel.Name, how: how, method: e.Sel.Name})
				}
			}
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						flag(kv.Value, "stored in field "+exprName(kv.Key))
					} else {
						flag(el, "stored in a composite literal")
					}
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && i < len(n.Rhs) {
						flag(n.Rhs[i], "assigned to field "+sel.Sel.Name)
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] {
						return true // the controller's own method (c.setHealth): run by it, not handed on
					}
				}
				for i, a := range n.Args {
					flag(a, "passed to "+exprName(n.Fun)+" as argument "+strconv.Itoa(i+1))
				}
			}
			return true
		})
	}
	return out
}

// controllerNames are the names a function gives the *Controller: its
// receiver's, its parameters' and a local it makes (c := &Controller{},
// in New).
func controllerNames(fd *ast.FuncDecl) map[string]bool {
	names := map[string]bool{}
	add := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, field := range fl.List {
			if ptr, ok := field.Type.(*ast.StarExpr); ok {
				if id, ok := ptr.X.(*ast.Ident); ok && id.Name == "Controller" {
					for _, n := range field.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	add(fd.Recv)
	add(fd.Type.Params)
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
			for i, rhs := range as.Rhs {
				if u, ok := rhs.(*ast.UnaryExpr); ok && u.Op == token.AND && i < len(as.Lhs) {
					if cl, ok := u.X.(*ast.CompositeLit); ok && exprName(cl.Type) == "Controller" {
						if id, ok := as.Lhs[i].(*ast.Ident); ok {
							names[id.Name] = true
						}
					}
				}
			}
		}
		return true
	})
	return names
}

// exprName is a short name for a call's function or a field's key.
func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprName(e.X) + "." + e.Sel.Name
	}
	return "a func"
}

// countFields counts a struct's fields, an embedded one as one.
func countFields(st *ast.StructType) int {
	n := 0
	for _, fl := range st.Fields.List {
		n += max(len(fl.Names), 1)
	}
	return n
}

// isCfgCall reports whether call is x.cfg(), the wiring's config.
func isCfgCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "cfg" && len(call.Args) == 0
}

// holdsController reports whether a struct has a *Controller field.
func holdsController(st *ast.StructType) bool {
	for _, fl := range st.Fields.List {
		if ptr, ok := fl.Type.(*ast.StarExpr); ok {
			if id, ok := ptr.X.(*ast.Ident); ok && id.Name == "Controller" {
				return true
			}
		}
	}
	return false
}

func receiverName(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
