package gated

import (
	"database/sql/driver"
	"io"
	"reflect"
)

// stmtRows are the rows of a statement prepared for one query (physConn.queryOnce): closing them
// closes the statement, as database/sql does. They keep every optional interface of
// database/sql/driver, answering as database/sql would when the driver's rows lack one.
type stmtRows struct {
	driver.Rows
	st driver.Stmt
}

var (
	_ driver.RowsNextResultSet              = (*stmtRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*stmtRows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*stmtRows)(nil)
	_ driver.RowsColumnTypeLength           = (*stmtRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*stmtRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*stmtRows)(nil)
)

func (r *stmtRows) Close() error {
	err := r.Rows.Close()
	r.st.Close()
	return err
}

func (r *stmtRows) HasNextResultSet() bool {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.HasNextResultSet()
	}
	return false
}

func (r *stmtRows) NextResultSet() error {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.NextResultSet()
	}
	return io.EOF
}

func (r *stmtRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *stmtRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *stmtRows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *stmtRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *stmtRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
