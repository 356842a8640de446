package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// TestShapeEscapes: what TestShape reports as a way back to the
// Controller handed to an owner, each story a case. A closure over the
// controller and a method value bound to it (c.poke) are the same
// back-pointer; a method of an owner (c.pub.forgetRecords) or one promoted
// from an embedded owner (c.prefetchStates, the store's) is not.
func TestShapeEscapes(t *testing.T) {
	const decls = `package controller
type Controller struct{ *stateStore; pub *publisher }
func (c *Controller) poke() {}
func (c *Controller) engineNow() int { return 0 }
`
	tests := []struct {
		name string
		body string // the body of func giveDuties(c *Controller)
		want []string
	}{
		{"a bound method handed on by the constructor that makes the controller", `x := &Controller{}; x.pub.delivered = x.poke`,
			[]string{"the Controller's method x.poke: assigned to field delivered"}},
		{"a closure over the controller stored in a field", `o := &owner{f: func() { c.poke() }}; _ = o`,
			[]string{"a func literal that captures the Controller: stored in field f"}},
		{"a closure over the controller passed on", `register(func() { c.poke() })`,
			[]string{"a func literal that captures the Controller: passed to register as argument 1"}},
		{"a closure that does not capture it", `o := &owner{f: func() {}}; _ = o`, nil},
		{"a bound method stored in a composite literal's field", `o := &owner{poke: c.poke}; _ = o`,
			[]string{"the Controller's method c.poke: stored in field poke"}},
		{"a bound method assigned to an owner's field", `c.pub.delivered = c.engineNow`,
			[]string{"the Controller's method c.engineNow: assigned to field delivered"}},
		{"a bound method passed to another function", `register(c.poke)`,
			[]string{"the Controller's method c.poke: passed to register as argument 1"}},
		{"a bound method in a list", `fs := []func(){c.poke}; _ = fs`,
			[]string{"the Controller's method c.poke: stored in a composite literal"}},
		{"an owner's method is the owner's", `c.stateStore.forgotten = c.pub.forgetRecords`, nil},
		{"a method promoted from an embedded owner is the owner's", `o := &owner{read: c.prefetchStates}; _ = o`, nil},
		{"calling the controller's method is no handing on", `c.poke(); n := c.engineNow(); _ = n`, nil},
		{"go and defer run it", `go c.poke(); defer c.poke()`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			files := map[string]*ast.File{}
			for name, src := range map[string]string{
				"controller.go": decls,
				"duties.go":     "package controller\nfunc giveDuties(c *Controller) {\n" + tt.body + "\n}\n",
			} {
				f, err := parser.ParseFile(fset, name, src, 0)
				if err != nil {
					t.Fatalf("parse %s: %v", name, err)
				}
				files[name] = f
			}
			var got []string
			for _, esc := range controllerEscapes(files) {
				got = append(got, esc.what+": "+esc.how)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("reported %q, want %q", got, tt.want)
			}
		})
	}
}
