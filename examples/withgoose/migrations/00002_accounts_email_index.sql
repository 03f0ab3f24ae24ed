-- CREATE INDEX CONCURRENTLY cannot run in a transaction. goose runs a NO TRANSACTION SQL
-- migration on the connection that holds the session lock, so it needs no second permit.
-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY accounts_email ON accounts (email);

-- +goose Down
DROP INDEX CONCURRENTLY accounts_email;
