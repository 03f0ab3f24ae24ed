package fakedb

import (
	"context"
	"database/sql/driver"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// stmt is a prepared statement; like the conn, its exported methods live on wrapper types.
type stmt struct {
	c        *conn
	text     string
	numInput int
	closed   atomic.Bool
}

// legacyStmt implements only driver.Stmt.
type legacyStmt struct{ s *stmt }

// modernStmt adds driver.StmtExecContext and driver.StmtQueryContext.
type modernStmt struct{ legacyStmt }

// legacyConvStmt is a legacyStmt with driver.ColumnConverter.
type legacyConvStmt struct{ legacyStmt }

// modernConvStmt is a modernStmt with driver.ColumnConverter.
type modernConvStmt struct{ modernStmt }

var (
	_ driver.Stmt             = legacyStmt{}
	_ driver.StmtExecContext  = modernStmt{}
	_ driver.StmtQueryContext = modernStmt{}
	_ driver.ColumnConverter  = legacyConvStmt{}
	_ driver.ColumnConverter  = modernConvStmt{}
)

// Close implements driver.Stmt; closing twice is harmless.
func (l legacyStmt) Close() error {
	entered, _ := l.s.c.enter(false)
	defer l.s.c.exit(entered)
	if !l.s.closed.Swap(true) {
		l.s.c.d.stmtsOpen.Add(-1)
	}
	return nil
}

// NumInput implements driver.Stmt: the number of `?` or the highest `$n` in the query, or -1
// when it has neither.
func (l legacyStmt) NumInput() int { return l.s.numInput }

// Exec implements driver.Stmt.
func (l legacyStmt) Exec(args []driver.Value) (driver.Result, error) {
	return l.s.exec(context.Background(), named(args))
}

// Query implements driver.Stmt.
func (l legacyStmt) Query(args []driver.Value) (driver.Rows, error) {
	return l.s.query(context.Background(), named(args))
}

// ExecContext implements driver.StmtExecContext.
func (m modernStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return m.s.exec(ctx, args)
}

// QueryContext implements driver.StmtQueryContext.
func (m modernStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return m.s.query(ctx, args)
}

// ColumnConverter implements driver.ColumnConverter (see ColumnConverterStmt).
func (legacyConvStmt) ColumnConverter(int) driver.ValueConverter { return joinConverter{} }

// ColumnConverter implements driver.ColumnConverter (see ColumnConverterStmt).
func (modernConvStmt) ColumnConverter(int) driver.ValueConverter { return joinConverter{} }

// joinConverter joins a []string with commas and otherwise applies the default conversion.
type joinConverter struct{}

// ConvertValue implements driver.ValueConverter.
func (joinConverter) ConvertValue(v any) (driver.Value, error) {
	if ss, ok := v.([]string); ok {
		return strings.Join(ss, ","), nil
	}
	return driver.DefaultParameterConverter.ConvertValue(v)
}

var errStmtClosed = &Error{Msg: "statement is closed"}

func (s *stmt) exec(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if s.closed.Load() {
		return nil, errStmtClosed
	}
	return s.c.exec(ctx, s.text, args)
}

func (s *stmt) query(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if s.closed.Load() {
		return nil, errStmtClosed
	}
	return s.c.query(ctx, s.text, args)
}

// named turns legacy arguments into ordinal NamedValues.
func named(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

// countPlaceholders returns the number of `?` or the highest `$n` in query, or -1 for none.
func countPlaceholders(query string) int {
	n := strings.Count(query, "?")
	for rest := query; ; {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			break
		}
		rest = rest[i+1:]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if k, err := strconv.Atoi(rest[:j]); err == nil && k > n {
			n = k
		}
	}
	if n == 0 {
		return -1
	}
	return n
}

// recordArgs stores args for Driver.ArgsSeen.
func (d *Driver) recordArgs(args []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	d.mu.Lock()
	d.argsSeen = vals
	d.mu.Unlock()
}

// resultSet is one result set of a query.
type resultSet struct {
	cols []string
	rows [][]driver.Value
}

// run executes every ";"-separated part of query and returns how many parts ran. With sets
// non-nil (a query) each part must produce a result set, which is appended to *sets.
func (c *conn) run(ctx context.Context, query string, args []driver.NamedValue, sets *[]resultSet) (int64, error) {
	var n int64
	for part := range strings.SplitSeq(query, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		word, rest, _ := strings.Cut(part, " ")
		var set *resultSet
		switch word {
		case "SELECT":
			v, err := strconv.ParseInt(rest, 10, 64)
			if rest == "CONNID" {
				v, err = c.id, nil
			}
			if err != nil {
				return n, &Error{Msg: "bad SELECT: " + part}
			}
			set = &resultSet{cols: []string{"v"}, rows: [][]driver.Value{{v}}}
		case "ECHO":
			if sets != nil {
				c.d.recordArgs(args)
			}
			set = &resultSet{cols: make([]string, len(args)), rows: [][]driver.Value{make([]driver.Value, len(args))}}
			for i, a := range args {
				set.cols[i] = "c" + strconv.Itoa(i+1)
				set.rows[0][i] = a.Value
			}
		case "BLOCK":
			if err := c.d.block(ctx, rest); err != nil {
				if c.d.opts.breakOnCancel {
					c.broken.Store(true)
				}
				return n, err
			}
			set = &resultSet{}
		case "FAIL":
			return n, &Error{Msg: rest}
		case "BADCONN":
			c.broken.Store(true)
			return n, driver.ErrBadConn
		}
		if sets != nil {
			if set == nil {
				return n, &Error{Msg: "cannot query: " + part}
			}
			*sets = append(*sets, *set)
		}
		n++
	}
	if sets != nil && len(*sets) == 0 {
		return n, &Error{Msg: "empty query"}
	}
	return n, nil
}

// rows is the result of a query; legacyRows implements only driver.Rows, modernRows adds
// driver.RowsColumnTypeDatabaseTypeName and driver.RowsNextResultSet.
type rows struct {
	c *conn

	mu     sync.Mutex
	sets   []resultSet
	set    int // current result set
	row    int // next row of the current set
	closed bool
}

type legacyRows struct{ r *rows }

type modernRows struct{ legacyRows }

var (
	_ driver.Rows                           = legacyRows{}
	_ driver.RowsColumnTypeDatabaseTypeName = modernRows{}
	_ driver.RowsNextResultSet              = modernRows{}
)

// Columns implements driver.Rows.
func (l legacyRows) Columns() []string {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.sets[l.r.set].cols
}

// Close implements driver.Rows; closing twice is harmless.
func (l legacyRows) Close() error {
	r := l.r
	entered, _ := r.c.enter(false)
	defer r.c.exit(entered)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.c.d.rowsOpen.Add(-1)
		r.c.mu.Lock()
		r.c.openRows--
		r.c.mu.Unlock()
	}
	return nil
}

// Next implements driver.Rows.
func (l legacyRows) Next(dest []driver.Value) error {
	r := l.r
	entered, _ := r.c.enter(false)
	defer r.c.exit(entered)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return &Error{Msg: "rows are closed"}
	}
	set := r.sets[r.set]
	if r.row >= len(set.rows) {
		return io.EOF
	}
	copy(dest, set.rows[r.row])
	r.row++
	return nil
}

// ColumnTypeDatabaseTypeName implements driver.RowsColumnTypeDatabaseTypeName: INT8, TEXT,
// BYTEA, FLOAT8, BOOL, TIMESTAMPTZ or UNKNOWN (nil) for driver values, else the Go type.
func (m modernRows) ColumnTypeDatabaseTypeName(i int) string {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.sets[r.set]
	if len(set.rows) == 0 || i >= len(set.rows[0]) {
		return "UNKNOWN"
	}
	switch v := set.rows[0][i].(type) {
	case nil:
		return "UNKNOWN"
	case int64:
		return "INT8"
	case string:
		return "TEXT"
	case []byte:
		return "BYTEA"
	case float64:
		return "FLOAT8"
	case bool:
		return "BOOL"
	case time.Time:
		return "TIMESTAMPTZ"
	default:
		return reflect.TypeOf(v).String()
	}
}

// HasNextResultSet implements driver.RowsNextResultSet.
func (m modernRows) HasNextResultSet() bool {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	return m.r.set+1 < len(m.r.sets)
}

// NextResultSet implements driver.RowsNextResultSet.
func (m modernRows) NextResultSet() error {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set+1 >= len(r.sets) {
		return io.EOF
	}
	r.set++
	r.row = 0
	return nil
}
