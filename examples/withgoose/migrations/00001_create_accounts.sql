-- +goose Up
CREATE TABLE accounts (
    id    bigserial PRIMARY KEY,
    email text NOT NULL
);

-- +goose Down
DROP TABLE accounts;
