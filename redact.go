package gated

import (
	"net/url"
	"strings"
)

// redact removes from msg, an inner driver's error about dsn, every form of the passwords that
// dsn holds. Drivers quote the DSN in some parse errors (lib/pq repeats the whole URL), and gated
// promises that no error it returns contains a password.
func redact(msg, dsn string) string {
	for _, s := range secretsOf(dsn) {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// secretsOf returns the passwords in dsn as written and as decoded: a URL's or a
// "user:password@" prefix's password, and the values of password keys in a query or in
// keyword/value form. It over-approximates rather than misses.
func secretsOf(dsn string) []string {
	var out []string
	add := func(s string) {
		out = append(out, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
	}
	rest := dsn
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, pass, ok := strings.Cut(rest[:at], ":"); ok && !strings.Contains(user, "=") {
			add(pass)
		}
	}
	for _, sep := range []string{"?", "&", " ", "\t", "\n"} {
		for _, part := range strings.Split(dsn, sep) {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "password") {
				continue
			}
			v = strings.TrimSpace(v)
			if end := strings.IndexAny(v, "&# \t\n"); end >= 0 && !strings.HasPrefix(v, "'") {
				v = v[:end]
			}
			add(v)
			add(strings.Trim(v, "'"))
			add(unescapeKV(strings.Trim(v, "'")))
		}
	}
	return out
}

// redactedError is an inner driver's error about a DSN, with the DSN's passwords removed from
// its message. It wraps the driver's error, so errors.As still finds the driver's type (whose own
// message may quote the password: print the redactedError, not what it wraps — except a
// *url.Error, which lib/pq returns for a URL it cannot parse and which quotes the whole URL:
// redactErr wraps a copy of it with the passwords removed).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr returns err with the passwords in dsn removed from its message.
func redactErr(err error, dsn string) error {
	if ue, ok := err.(*url.Error); ok {
		err = &url.Error{Op: ue.Op, URL: redact(ue.URL, dsn), Err: ue.Err}
	}
	return &redactedError{msg: redact(err.Error(), dsn), err: err}
}
