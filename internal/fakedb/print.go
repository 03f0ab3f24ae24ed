package fakedb

import "fmt"

// Format prints d as "fakedb.Driver" with the number of connections it opened, in every verb:
// never field by field, which would print the last DSN it was given, password and all.
func (d *Driver) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, "fakedb.Driver(opened %d)", d.opened.Load())
}
