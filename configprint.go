package gated

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/gatedsql/gated/internal/dsn"
)

// How a Config and a Connector print: as the DSN that FormatDSN writes, with every password
// replaced by "xxxxx", whatever the verb (a Formatter: fmt would print a struct field by field,
// the DSN among them, for a verb a Stringer does not serve, such as %d) and in log/slog.
//
// Config's methods have value receivers so that a Config prints so whether it is a value or a
// pointer, alone or in an exported field, slice or map of another value: fmt does not find a
// pointer method on a value. fmt finds no method at all on an unexported field, so a type that
// holds a Config in one (a Connector) needs printing methods of its own; print_test.go finds
// every exported type that can reach a DSN and prints it.

var (
	_ fmt.Formatter  = Config{}
	_ fmt.Stringer   = Config{}
	_ fmt.GoStringer = Config{}
	_ slog.LogValuer = Config{}

	_ fmt.Formatter  = (*Connector)(nil)
	_ fmt.Stringer   = (*Connector)(nil)
	_ fmt.GoStringer = (*Connector)(nil)
	_ slog.LogValuer = (*Connector)(nil)
)

// String returns c as a DSN, as [Config.FormatDSN] writes it, with the value of every password
// key (password, sslpassword, ...) and a URL's or mysql DSN's userinfo password replaced by
// "xxxxx", and anything else that spells a piece of a password removed as [Redact] does.
// Observer and Logger are not shown. fmt's %v, %+v and %s use it; it never shows a password.
// Use FormatDSN for the DSN itself.
func (c Config) String() string {
	return dsn.RedactDSN(c.FormatDSN())
}

// GoString returns c for fmt's %#v, without its password: gated.Config("<String>").
func (c Config) GoString() string {
	return "gated.Config(" + strconv.Quote(c.String()) + ")"
}

// Format prints c for fmt: %#v as GoString, every other verb as that verb prints c's String
// (%x in hex, %d as a bad verb), so that no verb shows a password.
func (c Config) Format(f fmt.State, verb rune) {
	printRedacted(f, verb, c.String, c.GoString)
}

// LogValue returns c for log/slog: its String, which never shows a password.
func (c Config) LogValue() slog.Value {
	return slog.StringValue(c.String())
}

// String returns the Connector's configuration as [Config.String] prints it, defaults filled
// in: its DSN with every password replaced by "xxxxx". fmt's %v, %+v and %s use it.
func (c *Connector) String() string {
	if c == nil {
		return "<nil>"
	}
	return c.cfg.String()
}

// GoString returns c for fmt's %#v, without its password: &gated.Connector("<String>").
func (c *Connector) GoString() string {
	if c == nil {
		return "(*gated.Connector)(nil)"
	}
	return "&gated.Connector(" + strconv.Quote(c.String()) + ")"
}

// Format prints c for fmt: %#v as GoString, every other verb as that verb prints c's String,
// so that no verb shows a password.
func (c *Connector) Format(f fmt.State, verb rune) {
	printRedacted(f, verb, c.String, c.GoString)
}

// LogValue returns c for log/slog: its String, which never shows a password.
func (c *Connector) LogValue() slog.Value {
	return slog.StringValue(c.String())
}

// printRedacted prints a value whose text without passwords is str() and goString(): %#v as
// goString(), and every other verb as it would print the string str().
func printRedacted(f fmt.State, verb rune, str, goString func() string) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, goString())
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), str())
}
