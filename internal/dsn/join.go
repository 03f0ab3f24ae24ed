package dsn

import (
	"net/url"
	"strings"
)

// Join returns dsn with params added, in a DSN from which Split takes exactly params back out
// and leaves dsn. The params go in front of a keyword/value or empty dsn ("gate_concurrent=4
// host=db"), and into the query of any other ("postgres://db/app?sslmode=require&gate_concurrent=4"),
// percent-encoded. With no params it returns dsn.
func Join(dsn string, params []Param) string {
	if len(params) == 0 {
		return dsn
	}
	var b strings.Builder
	if dsn == "" || formOf(dsn) == formKV {
		// In front, not behind: a trailing "password=" would take the next word as its value.
		for _, p := range params {
			b.WriteString(p.Key)
			b.WriteByte('=')
			writeKVValue(&b, p.Value)
			b.WriteByte(' ')
		}
		if dsn == "" {
			return b.String()[:b.Len()-1]
		}
		b.WriteString(dsn)
		return b.String()
	}
	q, frag := queryBounds(dsn)
	b.WriteString(dsn[:frag])
	sep := byte('?')
	if q >= 0 {
		// Even after an empty query ("db?"): Split keeps the '?' only while a parameter, even
		// an empty one, is left, so "db?&gate_queue=1" is what reads back as "db?".
		sep = '&'
	}
	for _, p := range params {
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(p.Key)
		b.WriteByte('=')
		// QueryEscape also escapes '@', '/', '?' and '#', so the added text cannot move the
		// query's start or the fragment that queryBounds finds.
		b.WriteString(url.QueryEscape(p.Value))
	}
	b.WriteString(dsn[frag:])
	return b.String()
}

// writeKVValue writes v so that splitKV reads it back unchanged.
func writeKVValue(b *strings.Builder, v string) {
	if v != "" && !strings.ContainsAny(v, " \t\n\v\f\r'\\") {
		b.WriteString(v)
		return
	}
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] == '\'' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('\'')
}
