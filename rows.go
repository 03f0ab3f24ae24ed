package gated

import (
	"database/sql/driver"
	"io"
	"reflect"
)

// rows are the rows of a query. They end the query's call when they close (see call), as
// database/sql ties its own context watch to the life of its Rows: until then the driver may
// still read the result from the server under the query's context. When the query ran on a
// statement prepared for this one use (physConn.queryOnce), closing the rows closes it, as
// database/sql does. They keep every optional interface of database/sql/driver, answering as
// database/sql would when the driver's rows lack one.
type rows struct {
	driver.Rows
	st   driver.Stmt // closed with the rows; nil when none
	cn   *conn       // the binding whose call the rows end; nil when none, or once closed
	call call
}

var (
	_ driver.RowsNextResultSet              = (*rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*rows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*rows)(nil)
	_ driver.RowsColumnTypeLength           = (*rows)(nil)
	_ driver.RowsColumnTypeNullable         = (*rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*rows)(nil)
)

// rowsOf returns the rows of the query whose call run handed over (cn.handed), which they end
// at Close. The binding's own rows value is used when it is free, so that a query allocates
// nothing here; rows opened while earlier ones of the binding are still open get their own.
func (cn *conn) rowsOf(dr driver.Rows) driver.Rows {
	cl := cn.handed
	cn.handed = call{}
	r, ok := dr.(*rows) // physConn.queryOnce's
	switch {
	case ok:
	case cn.rows.cn == nil && cn.rows.Rows == nil:
		r = &cn.rows
		r.Rows = dr
	default:
		r = &rows{Rows: dr}
	}
	r.cn, r.call = cn, cl
	return r
}

// Close closes the driver's rows and ends the query's call. The rows may be the binding's own
// value (rowsOf), which is free again afterwards; database/sql calls Close once and nothing after.
func (r *rows) Close() error {
	if r.Rows == nil {
		return nil
	}
	err := r.Rows.Close()
	if r.st != nil {
		r.st.Close()
	}
	if r.cn != nil {
		r.call.end()
		*r = rows{}
	}
	return err
}

func (r *rows) HasNextResultSet() bool {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.HasNextResultSet()
	}
	return false
}

func (r *rows) NextResultSet() error {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.NextResultSet()
	}
	return io.EOF
}

func (r *rows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *rows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *rows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *rows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *rows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
