package dsn

import (
	"errors"
	"strconv"
	"strings"
)

// An Error is a DSN that cannot be read: Key is the key at fault, or empty when the keyword/value
// syntax itself is broken. Its message holds at most that key, never the DSN.
type Error struct {
	Key string
	Err error
}

func (e *Error) Error() string {
	if e.Key == "" {
		return "invalid DSN: " + e.Err.Error()
	}
	return "DSN key " + e.Key + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// The reasons of an Error, for the pair of a key that Split takes out.
var (
	errMissingValue = errors.New(`missing "=" and value`)
	errUnterminated = errors.New("unterminated quoted value")
	errBackslashEnd = errors.New("value ends with a lone backslash")
	errStrandedForm = errors.New("cannot be taken out: what is left for the inner driver would be a keyword/value DSN that cannot be read")
)

// ShownValue quotes a value for an error message, unless it may hold another key's value: in
// keyword/value form "gate_queue= password=secret" gives gate_queue the value "password=secret",
// as libpq reads it, and an error must not repeat that.
func ShownValue(v string) string {
	if strings.ContainsAny(v, "= \t\n\r\\'") {
		return "(not shown: it contains '=', a quote, a backslash or a space; is a value missing?)"
	}
	return strconv.Quote(v)
}
