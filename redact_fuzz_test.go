package gated

// No error and no printed Config contains any piece of a password: passwords with quotes,
// backslashes, spaces and URL punctuation, in every DSN form, next to a value that makes the DSN
// fail (a bad gate_ value, a port pgx or lib/pq cannot use, an sslmode nobody knows).

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// passwordPieces returns the 4-character pieces of pw that do not occur in fixed: a piece the
// surrounding text spells anyway proves nothing.
func passwordPieces(pw string, fixed ...string) []string {
	r := []rune(pw)
	var out []string
	for i := 0; i+4 <= len(r); i++ {
		p := string(r[i : i+4])
		known := false
		for _, f := range fixed {
			if strings.Contains(f, p) {
				known = true
				break
			}
		}
		if !known {
			out = append(out, p)
		}
	}
	return out
}

// checkNoPiece fails when text holds a piece of the password.
func checkNoPiece(t *testing.T, what, dsn, text string, pieces []string) {
	t.Helper()
	for _, p := range pieces {
		if strings.Contains(text, p) {
			t.Fatalf("DSN %q: %s %q contains %q, a piece of the password", dsn, what, text, p)
		}
	}
}

// kvQuoted writes pw as a quoted keyword/value value, as libpq reads it.
func kvQuoted(pw string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
}

// kvBare writes pw as an unquoted keyword/value value: a backslash escapes the next byte.
func kvBare(pw string) string {
	var b strings.Builder
	for i := 0; i < len(pw); i++ {
		if strings.IndexByte(" \t\n\r\v\f'\\", pw[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(pw[i])
	}
	return b.String()
}

// passwordDSN returns a DSN with password pw in the given form (0..5: quoted, bare, URL userinfo,
// URL query, quoted with spaces around '=', URL userinfo unescaped) and, in bad (0..3), a value
// that makes it fail: a bad gate_ value, a bad port for pgx or for lib/pq, a bad sslmode. It
// returns the DSN without the bad value too, and the DSN with the password left out.
func passwordDSN(pw string, form, bad uint8) (dsn, good, without string) {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("app", pw), Host: "127.0.0.1:5432", Path: "/postgres"}
	noPW := url.URL{Scheme: "postgres", User: url.User("app"), Host: "127.0.0.1:5432", Path: "/postgres"}
	q := url.Values{"sslmode": {"disable"}}
	var kvPW string
	switch form % 6 {
	case 0:
		kvPW = "password=" + kvQuoted(pw)
	case 1:
		kvPW = "password=" + kvBare(pw)
	case 4:
		kvPW = "password = " + kvQuoted(pw)
	}
	isURL := form%6 == 2 || form%6 == 3
	if form%6 == 5 {
		// Written by hand, unescaped, as a hurried user would.
		raw := func(port, extra string) string {
			s := "postgres://app:" + pw + "@127.0.0.1:" + port + "/postgres?sslmode=disable"
			if extra != "" {
				s += "&" + extra
			}
			return s
		}
		without := func(port, extra string) string {
			return strings.Replace(raw(port, extra), pw, "", 1)
		}
		switch bad % 4 {
		case 0:
			return raw("5432", "gate_queue=-x"), raw("5432", ""), without("5432", "gate_queue=-x")
		case 1:
			return raw("abc", ""), raw("5432", ""), without("abc", "")
		case 2:
			return raw("abc", "gate_driver=postgres"), raw("5432", ""), without("abc", "gate_driver=postgres")
		}
		return raw("5432", "sslmode=bogus"), raw("5432", ""), without("5432", "sslmode=bogus")
	}
	if form%6 == 3 {
		u.User = url.User("app")
		q.Set("password", pw)
	}
	mk := func(port, extra string) (string, string) {
		if isURL {
			u.Host, noPW.Host = "127.0.0.1:"+port, "127.0.0.1:"+port
			qq := url.Values{}
			for k, v := range q {
				qq[k] = v
			}
			if extra != "" {
				k, v, _ := strings.Cut(extra, "=")
				qq.Set(k, v)
			}
			u.RawQuery = qq.Encode()
			qq.Del("password")
			noPW.RawQuery = qq.Encode()
			return u.String(), noPW.String()
		}
		base := "host=127.0.0.1 port=" + port + " user=app sslmode=disable"
		if extra != "" {
			base += " " + extra
		}
		return base + " " + kvPW, base
	}
	good, _ = mk("5432", "")
	switch bad % 4 {
	case 0:
		dsn, without = mk("5432", "gate_queue=-x")
	case 1:
		dsn, without = mk("abc", "")
	case 2:
		dsn, without = mk("abc", "gate_driver=postgres")
	case 3:
		dsn, without = mk("5432", "sslmode=bogus")
	}
	return dsn, good, without
}

// checkPasswordNeverShown runs dsn through ParseDSN, sql.Open and a first operation, and prints
// the Config of good in every way fmt and slog print it.
func checkPasswordNeverShown(t *testing.T, pw string, form, bad uint8) {
	dsn, good, without := passwordDSN(pw, form, bad)
	pieces := passwordPieces(pw, append(errorTexts(without), without, redacted)...)
	if len(pieces) == 0 {
		return
	}
	for _, text := range errorTexts(dsn) {
		checkNoPiece(t, "error", dsn, text, pieces)
	}
	cfg, err := ParseDSN(good)
	if err != nil {
		t.Fatalf("ParseDSN(%q): %v", good, err)
	}
	for _, text := range configTexts(cfg) {
		checkNoPiece(t, "printed Config", good, text, pieces)
	}
	c, err := NewConnector(cfg)
	if err != nil {
		return // printed as an error above, when the DSN was opened
	}
	defer c.Close()
	for _, text := range connectorTexts(c) {
		checkNoPiece(t, "printed Connector", good, text, pieces)
	}
}

// connectorTexts prints c as fmt and slog do, with every verb, alone and in a struct of the
// caller's.
func connectorTexts(c *Connector) []string {
	held := struct{ c *Connector }{c}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d"} {
		out = append(out, fmt.Sprintf(verb, c), fmt.Sprintf(verb, held))
	}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, noTime) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, noTime) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("db", "connector", c, "held", held)
		out = append(out, b.String())
	}
	return out
}

// errorTexts returns the errors of ParseDSN(dsn), and of sql.Open and Ping.
func errorTexts(dsn string) []string {
	var out []string
	if _, err := ParseDSN(dsn); err != nil {
		out = append(out, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
	}
	db, err := sql.Open(DriverName, dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	if err != nil {
		out = append(out, err.Error(), fmt.Sprintf("%+v", err))
	}
	return out
}

// noTime leaves the time out of log records: its digits may spell a piece of a password.
var noTime = &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}}

// configTexts prints cfg as fmt and slog do: the pointer and the value, with every verb a
// caller uses for a struct, and as an attribute of JSON and text log records.
func configTexts(cfg *Config) []string {
	out := []string{
		fmt.Sprint(cfg), fmt.Sprint(*cfg),
		fmt.Sprintf("%v %+v %#v %s %q %d", cfg, cfg, cfg, cfg, cfg, cfg),
		fmt.Sprintf("%v %+v %#v %s %q %d", *cfg, *cfg, *cfg, *cfg, *cfg, *cfg),
		fmt.Sprintf("%v", struct{ C Config }{*cfg}),
	}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, noTime) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, noTime) },
	} {
		var b bytes.Buffer
		l := slog.New(h(&b))
		l.Info("cfg", "config", cfg)
		l.Info("cfg", "config", *cfg)
		l.Info("cfg", slog.Any("config", cfg))
		out = append(out, b.String())
	}
	return out
}

// The reported case: pgx cuts a quoted password apart at its space and redacts only the first
// part of it.
func TestErrorsHoldNoPieceOfAQuotedPassword(t *testing.T) {
	const pw = `se'cr etWORD`
	dsn := `host=127.0.0.1 port=abc user=postgres password='se\'cr etWORD'`
	db, err := sql.Open(DriverName, dsn)
	if err == nil {
		err = db.Ping()
		db.Close()
	}
	if err == nil {
		t.Fatal("a DSN with port=abc worked")
	}
	checkNoPiece(t, "error", dsn, err.Error(), passwordPieces(pw, dsn[:strings.Index(dsn, "password")]))
	for form := range uint8(6) {
		for bad := range uint8(4) {
			checkPasswordNeverShown(t, pw, form, bad)
		}
	}
}

// fuzzPassword turns fuzzed bytes into a password of at least 4 characters drawn mostly from
// what DSN syntax treats specially: quotes, backslashes, spaces, '=', '&', '%', '@', '/', '?',
// '#', ':', non-ASCII letters, and a marker that fixed text does not spell; no 'x', of which
// the redaction mark "xxxxx" is made.
func fuzzPassword(raw string) string {
	const special = `'\ =&%@/?#:"+` + "\t"
	var b strings.Builder
	b.WriteString("Ωq")
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c % 4 {
		case 0:
			b.WriteByte(special[int(c/4)%len(special)])
		case 1:
			b.WriteRune([]rune("äßЖ漢é")[int(c/4)%5])
		default:
			b.WriteByte("abcdefghijkmnopqrstuvwyzQWXZ0123456789"[int(c/4)%38])
		}
	}
	b.WriteString("Zk")
	return b.String()
}

func FuzzErrorsAndPrintedConfigsHoldNoPieceOfThePassword(f *testing.F) {
	for _, s := range []string{"", "se'cr etWORD", `a\b'c d=e&f%g@h`, "x y", "%zz@@", "'''", `\\\`, "ä ß"} {
		for form := range uint8(6) {
			f.Add(s, form, form%4)
		}
	}
	f.Fuzz(func(t *testing.T, raw string, form, bad uint8) {
		if len(raw) > 40 {
			t.Skip("long enough")
		}
		pw := fuzzPassword(raw)
		if !utf8.ValidString(pw) {
			t.Skip()
		}
		checkPasswordNeverShown(t, pw, form, bad)
	})
}
