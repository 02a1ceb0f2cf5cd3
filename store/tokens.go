package store

import (
	"context"
	"database/sql"
	"errors"
)

// TokenOwner returns the name of the local actor whose bearer token token
// is, or ENOTFOUND. It tells a token of another actor (403) from a wrong
// one (401) where a route is its owner's only; Authenticate stays the way
// to accept a token.
func (s *Store) TokenOwner(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", Errorf(ENOTFOUND, "no such token")
	}
	var name string
	err := s.db.Read.QueryRowContext(ctx, `SELECT name FROM actors WHERE token_hash = ? AND deleted_at IS NULL`,
		hashToken(token)).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", Errorf(ENOTFOUND, "no such token")
	}
	if err != nil {
		return "", wrap("token owner", err)
	}
	return name, nil
}
