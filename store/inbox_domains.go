package store

import (
	"context"
	"database/sql"
	"strings"
)

// DomainBlockChecker answers IsDomainBlocked with a statement prepared once,
// for callers that ask on every request (the inbox). It reads the table
// each time, so a block takes effect at once. It is safe for concurrent use.
type DomainBlockChecker struct {
	stmt *sql.Stmt
}

// domainCandidates is how many suffixes of a host one query checks; longer
// hosts take more than one query.
const domainCandidates = 8

// NewDomainBlockChecker prepares the checker on the read pool. The
// statement lives as long as the database.
func (s *Store) NewDomainBlockChecker(ctx context.Context) (*DomainBlockChecker, error) {
	q := `SELECT COUNT(*) FROM domain_blocks WHERE domain IN (?` + strings.Repeat(", ?", domainCandidates-1) + `)`
	stmt, err := s.db.Read.PrepareContext(ctx, q)
	if err != nil {
		return nil, wrap("prepare domain block check", err)
	}
	return &DomainBlockChecker{stmt: stmt}, nil
}

// IsDomainBlocked reports whether host (a host name, host:port or URL) is
// a blocked domain or a subdomain of one, as Store.IsDomainBlocked.
func (c *DomainBlockChecker) IsDomainBlocked(ctx context.Context, host string) (bool, error) {
	h := NormalizeDomain(host)
	if h == "" {
		return false, nil
	}
	return c.blocked(ctx, h)
}

// blocked checks the normalized host h and each of its parent domains.
func (c *DomainBlockChecker) blocked(ctx context.Context, h string) (bool, error) {
	var cands []any
	for _, d := range domainSuffixes(h) {
		cands = append(cands, d)
	}
	for len(cands) > 0 {
		n := min(len(cands), domainCandidates)
		args := make([]any, domainCandidates)
		copy(args, cands[:n])
		for i := n; i < domainCandidates; i++ {
			args[i] = cands[0] // padding repeats a candidate already asked
		}
		var found int
		if err := c.stmt.QueryRowContext(ctx, args...).Scan(&found); err != nil {
			return false, wrap("is domain blocked", err)
		}
		if found > 0 {
			return true, nil
		}
		cands = cands[n:]
	}
	return false, nil
}
