package coordinator

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// eventTypes reads this package's non-test sources and returns the event types declared (named
// ev…), those of the events sent (composite literals passed to send or sent on an inbox) and
// those handle has a case for.
func eventTypes(t *testing.T) (declared, sent, handled map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		files = append(files, f)
	}
	declared, sent, handled = map[string]bool{}, map[string]bool{}, map[string]bool{}
	litType := func(e ast.Expr) {
		if lit, ok := e.(*ast.CompositeLit); ok {
			if id, ok := lit.Type.(*ast.Ident); ok {
				sent[id.Name] = true
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if strings.HasPrefix(n.Name.Name, "ev") {
					declared[n.Name.Name] = true
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "send" && len(n.Args) == 1 {
					litType(n.Args[0])
				}
			case *ast.SendStmt:
				if sel, ok := n.Chan.(*ast.SelectorExpr); ok && sel.Sel.Name == "inbox" {
					litType(n.Value)
				}
			case *ast.FuncDecl:
				if n.Name.Name != "handle" || n.Recv == nil {
					return true
				}
				ast.Inspect(n.Body, func(n ast.Node) bool {
					if sw, ok := n.(*ast.TypeSwitchStmt); ok {
						for _, c := range sw.Body.List {
							for _, e := range c.(*ast.CaseClause).List {
								if id, ok := e.(*ast.Ident); ok {
									handled[id.Name] = true
								}
							}
						}
						return false // the outer switch only
					}
					return true
				})
			}
			return true
		})
	}
	return declared, sent, handled
}

// Every event type the package declares or sends has a case in jobMaster.handle: one without
// would now panic (TestJobMasterPanicsOnUnknownEvent), where it used to be dropped.
func TestJobMasterHandlesEveryEvent(t *testing.T) {
	declared, sent, handled := eventTypes(t)
	if len(declared) == 0 || len(sent) == 0 || len(handled) == 0 {
		t.Fatalf("found no events (declared %v, sent %v, handled %v): has the code moved?", declared, sent, handled)
	}
	for _, set := range []struct {
		name  string
		types map[string]bool
	}{{"declared", declared}, {"sent", sent}} {
		for _, ty := range slices.Sorted(maps.Keys(set.types)) {
			if !handled[ty] {
				t.Errorf("event %s is %s but jobMaster.handle has no case for it", ty, set.name)
			}
		}
	}
	for _, ty := range slices.Sorted(maps.Keys(handled)) {
		if !declared[ty] {
			t.Errorf("jobMaster.handle has a case for %s, which is not an event type declared here", ty)
		}
	}
	for _, ty := range slices.Sorted(maps.Keys(declared)) {
		if !sent[ty] {
			t.Errorf("event %s is declared but never sent", ty)
		}
	}
}

func TestJobMasterPanicsOnUnknownEvent(t *testing.T) {
	type evUnknown struct{}
	m := &jobMaster{id: "j1"}
	defer func() {
		want := fmt.Sprintf("job master j1: unknown event %T", evUnknown{})
		if r := recover(); r != want {
			t.Errorf("handle(evUnknown{}) panicked with %v, want %q", r, want)
		}
	}()
	m.handle(evUnknown{})
}
