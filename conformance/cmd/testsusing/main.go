// Command testsusing lists the top-level tests of a package that reach one of the given
// functions, directly or through helper functions of the same package's test files.
//
//	testsusing DIR pqtest.DB pqtest.MustDB
//
// prints one test name per line, sorted. It reads DIR's _test.go files only and follows calls to
// package-level functions by name (function literals count as part of the function that holds
// them); a call through a variable or an interface is not followed.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: testsusing DIR pkg.Func...")
		os.Exit(2)
	}
	names, err := testsUsing(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsusing:", err)
		os.Exit(2)
	}
	for _, n := range names {
		fmt.Println(n)
	}
}

func testsUsing(dir string, targets []string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	calls := make(map[string][]string) // function -> package-level functions and targets it calls
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || fd.Recv != nil {
				continue
			}
			name := fd.Name.Name
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				ce, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fun := ce.Fun
				if ix, ok := fun.(*ast.IndexExpr); ok { // a generic call: f[T](...)
					fun = ix.X
				}
				switch fn := fun.(type) {
				case *ast.Ident:
					calls[name] = append(calls[name], fn.Name)
				case *ast.SelectorExpr:
					if x, ok := fn.X.(*ast.Ident); ok {
						calls[name] = append(calls[name], x.Name+"."+fn.Sel.Name)
					}
				}
				return true
			})
		}
	}
	reaches := make(map[string]bool)
	for _, t := range targets {
		reaches[t] = true
	}
	for changed := true; changed; { // a fixed point: few functions, few rounds
		changed = false
		for fn, callees := range calls {
			if reaches[fn] {
				continue
			}
			if slices.ContainsFunc(callees, func(c string) bool { return reaches[c] }) {
				reaches[fn], changed = true, true
			}
		}
	}
	var tests []string
	for fn := range calls {
		if reaches[fn] && strings.HasPrefix(fn, "Test") && fn != "TestMain" {
			tests = append(tests, fn)
		}
	}
	slices.Sort(tests)
	return tests, nil
}
