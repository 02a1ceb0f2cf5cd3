package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/courier-ap/courier/activitypub"
)

// Limits of actor profile fields.
const (
	MaxDisplayNameLen = 100   // characters
	MaxSummaryLen     = 5_000 // characters
)

var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,30}$`)

// ValidName reports whether name is a valid local actor name: 1 to 30 of
// a-z, 0-9 and underscore.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Actor is a local actor.
type Actor struct {
	ID                        int64
	Name                      string
	DisplayName               string
	Summary                   string
	ManuallyApprovesFollowers bool
	PrivateKeyPEM             string // PKCS #8 "PRIVATE KEY"
	PublicKeyPEM              string // SPKI "PUBLIC KEY"
	CreatedAt                 time.Time
	UpdatedAt                 time.Time

	// URI is the actor's ActivityPub id, {base}/users/{name}.
	URI string

	// Ed25519Key is the actor's Ed25519 key (migration 0013), published as
	// a Multikey in assertionMethod; nil only for a row without a seed.
	Ed25519Key ed25519.PrivateKey

	// Profile is what the actor document carries beyond name and summary
	// (profile.go).
	Profile Profile
}

// NewActor is the input of CreateActor.
type NewActor struct {
	Name                      string
	DisplayName               string
	Summary                   string
	ManuallyApprovesFollowers bool
}

func validateProfile(displayName, summary string) error {
	if utf8.RuneCountInString(displayName) > MaxDisplayNameLen {
		return Errorf(EINVALID, "display name is longer than %d characters", MaxDisplayNameLen)
	}
	if utf8.RuneCountInString(summary) > MaxSummaryLen {
		return Errorf(EINVALID, "summary is longer than %d characters", MaxSummaryLen)
	}
	if !utf8.ValidString(displayName) || !utf8.ValidString(summary) {
		return Errorf(EINVALID, "display name and summary must be UTF-8")
	}
	return nil
}

// CreateActor creates a local actor with a fresh RSA-2048 key pair and a
// fresh bearer token for its outbox. The token is returned once; only its
// SHA-256 is stored. A malformed name is EINVALID, a taken one or that of
// a deleted actor ECONFLICT.
func (s *Store) CreateActor(ctx context.Context, in NewActor) (*Actor, string, error) {
	if !ValidName(in.Name) {
		return nil, "", Errorf(EINVALID, "actor name %q is invalid: use 1 to 30 of a-z, 0-9 and _", in.Name)
	}
	if err := validateProfile(in.DisplayName, in.Summary); err != nil {
		return nil, "", err
	}
	// Fail fast on a taken name before spending a key generation.
	if _, err := s.ActorByName(ctx, in.Name); err == nil {
		return nil, "", Errorf(ECONFLICT, "actor name %q is taken", in.Name)
	}
	if _, err := s.DeletedActor(ctx, in.Name); err == nil {
		return nil, "", errNameOfDeleted(in.Name)
	}
	key, err := s.newKey()
	if err != nil {
		return nil, "", fmt.Errorf("store: create actor: generate key: %w", err)
	}
	privPEM, pubPEM, err := encodeKey(key)
	if err != nil {
		return nil, "", fmt.Errorf("store: create actor: %w", err)
	}
	token, hash, err := newToken()
	if err != nil {
		return nil, "", fmt.Errorf("store: create actor: %w", err)
	}
	edKey, err := activitypub.GenerateEd25519Key()
	if err != nil {
		return nil, "", fmt.Errorf("store: create actor: %w", err)
	}
	t := s.clock()
	a := &Actor{
		Name: in.Name, DisplayName: in.DisplayName, Summary: in.Summary,
		ManuallyApprovesFollowers: in.ManuallyApprovesFollowers,
		PrivateKeyPEM:             privPEM, PublicKeyPEM: pubPEM, Ed25519Key: edKey,
		CreatedAt: t, UpdatedAt: t, URI: s.uris.Actor(in.Name),
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		// A deleted actor's name is recorded in the transaction that
		// deletes it, while its row (which holds the name) stays, so the
		// name is taken either way until then.
		if _, err := s.deletedActor(ctx, tx, in.Name); err == nil {
			return errNameOfDeleted(in.Name)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		// One statement decides a race for the name: the second insert
		// waits for the first and inserts nothing.
		err := tx.QueryRowContext(ctx, `INSERT INTO actors
			(name, display_name, summary, manually_approves_followers, private_key_pem, public_key_pem, token_hash, created_at, updated_at, ed25519_seed)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING id`,
			a.Name, a.DisplayName, a.Summary, a.ManuallyApprovesFollowers, privPEM, pubPEM, hash, ms(t), ms(t), edKey.Seed(),
		).Scan(&a.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return Errorf(ECONFLICT, "actor name %q is taken", in.Name)
		}
		return err
	})
	if err != nil {
		return nil, "", wrap("create actor", err)
	}
	return a, token, nil
}

// errNameOfDeleted refuses the name of a deleted actor: peers keep the
// old actor and its key cached, so a new actor of that name would not be
// believed.
func errNameOfDeleted(name string) error {
	return Errorf(ECONFLICT, "actor name %q belonged to a deleted actor and cannot be used again (peers keep its old key)", name)
}

// newToken returns a random bearer token (32 bytes, base64url) and its
// stored form, the hex SHA-256.
func newToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, hashToken(token), nil
}

func hashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func encodeKey(key *rsa.PrivateKey) (privPEM, pubPEM string, err error) {
	if privPEM, err = activitypub.EncodePrivateKeyPEM(key); err != nil {
		return "", "", err
	}
	if pubPEM, err = activitypub.EncodePublicKeyPEM(&key.PublicKey); err != nil {
		return "", "", err
	}
	return privPEM, pubPEM, nil
}

const actorColumns = `id, name, display_name, summary, manually_approves_followers,
	private_key_pem, public_key_pem, created_at, updated_at, ed25519_seed, profile_json`

// scanActor scans actorColumns, then any further columns into extra.
func (s *Store) scanActor(row interface{ Scan(...any) error }, extra ...any) (*Actor, error) {
	var a Actor
	var created, updated int64
	var seed []byte
	var profile string
	dest := []any{&a.ID, &a.Name, &a.DisplayName, &a.Summary, &a.ManuallyApprovesFollowers,
		&a.PrivateKeyPEM, &a.PublicKeyPEM, &created, &updated, &seed, &profile}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	if err := a.Profile.decode(profile); err != nil {
		return nil, err
	}
	if len(seed) == ed25519.SeedSize {
		a.Ed25519Key = ed25519.NewKeyFromSeed(seed)
	}
	a.CreatedAt, a.UpdatedAt = fromMS(created), fromMS(updated)
	a.URI = s.uris.Actor(a.Name)
	return &a, nil
}

// ActorByName returns the local actor name, or ENOTFOUND (for a deleted
// actor too).
func (s *Store) ActorByName(ctx context.Context, name string) (*Actor, error) {
	return s.actorByName(ctx, s.db.Read, name)
}

func (s *Store) actorByName(ctx context.Context, q queryer, name string) (*Actor, error) {
	return s.actorNamed(ctx, q, name, false)
}

// actorNamed reads the local actor name through q; a deleted one only
// when deleted is true.
func (s *Store) actorNamed(ctx context.Context, q queryer, name string, deleted bool) (*Actor, error) {
	return s.actorNamedLock(ctx, q, name, deleted, "")
}

// actorForUpdate reads the local actor name (not deleted) in tx and locks
// its row (forUpdate) for the changes tx goes on to make.
func (s *Store) actorForUpdate(ctx context.Context, tx *sql.Tx, name string) (*Actor, error) {
	return s.actorNamedLock(ctx, tx, name, false, s.forUpdate())
}

func (s *Store) actorNamedLock(ctx context.Context, q queryer, name string, deleted bool, lock string) (*Actor, error) {
	if !ValidName(name) {
		return nil, Errorf(ENOTFOUND, "no actor %q", name)
	}
	a, err := s.scanActor(q.QueryRowContext(ctx, `SELECT `+actorColumns+` FROM actors
		WHERE name = ? AND (deleted_at IS NULL OR ? = 1)`+lock, name, deleted))
	if err != nil {
		return nil, wrap("actor by name", notFound(err, ENOTFOUND, "no actor %q", name))
	}
	return a, nil
}

// ActorByID returns the local actor with row id id, or ENOTFOUND.
func (s *Store) ActorByID(ctx context.Context, id int64) (*Actor, error) {
	a, err := s.scanActor(s.db.Read.QueryRowContext(ctx, `SELECT `+actorColumns+` FROM actors WHERE id = ?`, id))
	if err != nil {
		return nil, wrap("actor by id", notFound(err, ENOTFOUND, "no actor %d", id))
	}
	return a, nil
}

// ActorByURI returns the local actor whose ActivityPub id (or key id) is
// uri, or ENOTFOUND. A deleted actor is returned until ReapDeletedActors
// removes it, so that the deliveries of its Delete are signed.
func (s *Store) ActorByURI(ctx context.Context, uri string) (*Actor, error) {
	return s.localActorOf(ctx, s.db.Read, uri, true)
}

// localActor is ActorByURI read through q, without deleted actors: what
// the inbox imports never concerns a deleted actor.
func (s *Store) localActor(ctx context.Context, q queryer, uri string) (*Actor, error) {
	return s.localActorOf(ctx, q, uri, false)
}

func (s *Store) localActorOf(ctx context.Context, q queryer, uri string, deleted bool) (*Actor, error) {
	uri, _, _ = strings.Cut(uri, "#")
	name, ok := s.uris.ActorName(uri)
	if !ok {
		return nil, Errorf(ENOTFOUND, "no local actor %q", uri)
	}
	return s.actorNamed(ctx, q, name, deleted)
}

// dummyHash keeps Authenticate's timing the same for unknown names.
var dummyHash = hashToken("courier-no-such-actor")

// Authenticate returns the actor name if token is its bearer token. The
// comparison takes constant time; an unknown name or a wrong token is
// EUNAUTHORIZED, with the same message.
func (s *Store) Authenticate(ctx context.Context, name, token string) (*Actor, error) {
	stored := dummyHash
	var a *Actor
	if ValidName(name) {
		var hash string
		var err error
		a, err = s.scanActor(s.db.Read.QueryRowContext(ctx,
			`SELECT `+actorColumns+`, token_hash FROM actors WHERE name = ? AND deleted_at IS NULL`, name), &hash)
		switch {
		case err == nil:
			stored = hash
		case !errors.Is(err, sql.ErrNoRows):
			return nil, wrap("authenticate", err)
		}
	}
	ok := subtle.ConstantTimeCompare([]byte(hashToken(token)), []byte(stored)) == 1
	if !ok || a == nil || token == "" {
		return nil, Errorf(EUNAUTHORIZED, "invalid bearer token")
	}
	return a, nil
}

// ActorUpdate changes a local actor's profile. Nil fields are left alone.
type ActorUpdate struct {
	DisplayName               *string
	Summary                   *string
	ManuallyApprovesFollowers *bool
	// Profile changes the profile fields it sets (profile.go).
	Profile *ProfileUpdate
	// RotateKey replaces the actor's key pair with a fresh one.
	RotateKey bool
}

// CountActors returns the number of local actors.
func (s *Store) CountActors(ctx context.Context) (int, error) {
	var n int
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM actors`).Scan(&n); err != nil {
		return 0, wrap("count actors", err)
	}
	return n, nil
}
