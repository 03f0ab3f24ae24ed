package gated

import (
	"log/slog"
	"strconv"
)

// How a Config prints: as the DSN that FormatDSN writes, with every password replaced by "xxxxx".
// The methods have value receivers so that a Config prints so whether it is a value or a pointer,
// alone or inside another struct: fmt does not find a pointer method on a value.

var (
	_ interface{ String() string }   = Config{}
	_ interface{ GoString() string } = Config{}
	_ slog.LogValuer                 = Config{}
)

// String returns c as a DSN, as [Config.FormatDSN] writes it, with the value of every password
// key (password, sslpassword, ...) and a URL's or mysql DSN's userinfo password replaced by
// "xxxxx", and anything else that spells a piece of a password removed as [Redact] does.
// Observer and Logger are not shown. fmt's %v, %+v and %s use it; it never shows a password.
// Use FormatDSN for the DSN itself.
func (c Config) String() string {
	return redactDSN(c.FormatDSN())
}

// GoString returns c for fmt's %#v, without its password: gated.Config("<String>").
func (c Config) GoString() string {
	return "gated.Config(" + strconv.Quote(c.String()) + ")"
}

// LogValue returns c for log/slog: its String, which never shows a password.
func (c Config) LogValue() slog.Value {
	return slog.StringValue(c.String())
}
