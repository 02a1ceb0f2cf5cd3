package store

import (
	"context"
	"crypto/rsa"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb"
)

// Instance is the server's own actor ({base}/actor, type Application). It
// never posts; courier signs its fetches of remote actors and keys with its
// key, so a peer that requires signed GETs can verify them.
type Instance struct {
	ID            string
	Key           *rsa.PrivateKey
	PublicKeyPEM  string
	PrivateKeyPEM string
}

// Signer is the key fetches are signed with.
func (i *Instance) Signer() activitypub.Signer {
	return activitypub.Signer{KeyID: activitypub.KeyID(i.ID), Key: i.Key}
}

// InstanceActor is the instance actor's id.
func (u URIs) InstanceActor() string { return u.Base + "/actor" }

// InstanceOutbox is the instance actor's (always empty) outbox.
func (u URIs) InstanceOutbox() string { return u.InstanceActor() + "/outbox" }

// InstanceUsername is the instance actor's preferredUsername: the host
// without its port (GoToSocial refuses a "host:port" username as an IRI).
// WebFinger answers acct:{InstanceUsername}@{Host} with the instance actor.
func (u URIs) InstanceUsername() string {
	p, err := url.Parse(u.Base)
	if err != nil {
		return ""
	}
	return p.Hostname()
}

// InstanceActor returns the instance actor, creating its key on first use.
// The server and the worker may both call it at start-up: the insert is
// conflict-ignored and both read back the one row that won.
func (s *Store) InstanceActor(ctx context.Context) (*Instance, error) {
	inst, err := s.readInstance(ctx)
	if err == nil {
		return inst, nil
	}
	if err != sql.ErrNoRows {
		return nil, err
	}
	key, err := s.newKey()
	if err != nil {
		return nil, fmt.Errorf("store: instance key: %w", err)
	}
	priv, pub, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO instance_actor (id, private_key_pem, public_key_pem, created_at)
			VALUES (1, ?, ?, ?) ON CONFLICT (id) DO NOTHING`, priv, pub, ms(s.now()))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: save instance key: %w", err)
	}
	return s.readInstance(ctx)
}

func (s *Store) readInstance(ctx context.Context) (*Instance, error) {
	var priv, pub string
	err := s.db.Write.QueryRowContext(ctx, `SELECT private_key_pem, public_key_pem FROM instance_actor WHERE id = 1`).Scan(&priv, &pub)
	if err != nil {
		if err == sql.ErrNoRows {
			return nil, err
		}
		return nil, fmt.Errorf("store: read instance key: %w", err)
	}
	key, err := activitypub.ParsePrivateKeyPEM(priv)
	if err != nil {
		return nil, fmt.Errorf("store: instance key: %w", err)
	}
	return &Instance{ID: s.uris.InstanceActor(), Key: key, PublicKeyPEM: pub, PrivateKeyPEM: priv}, nil
}

// InstanceDocument is the instance actor's document.
func (s *Store) InstanceDocument(i *Instance) ([]byte, error) {
	u := s.uris
	return activitypub.MarshalActorDocument(&activitypub.Actor{
		ID:                        i.ID,
		Type:                      "Application",
		PreferredUsername:         u.InstanceUsername(),
		Name:                      u.Host(),
		URL:                       u.Base + "/",
		Inbox:                     i.ID + "/inbox",
		Outbox:                    u.InstanceOutbox(),
		SharedInbox:               u.SharedInbox(),
		ManuallyApprovesFollowers: true,
		PublicKey:                 activitypub.PublicKey{ID: activitypub.KeyID(i.ID), Owner: i.ID, PublicKeyPem: i.PublicKeyPEM},
	})
}

// RecordBaseURL records the base URL the store builds ids from as the one
// this database is served under (the server and the worker at start), for
// the commands that are given none (RecordedBaseURL).
func (s *Store) RecordBaseURL(ctx context.Context) error {
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO instance_base_url (id, base_url, updated_at) VALUES (1, ?, ?)
			ON CONFLICT (id) DO UPDATE SET base_url = excluded.base_url, updated_at = excluded.updated_at`,
			s.uris.Base, ms(s.now()))
		return err
	})
	return wrap("record base URL", err)
}

// RecordedBaseURL returns the base URL recorded by RecordBaseURL in db, ""
// when none was.
func RecordedBaseURL(ctx context.Context, db *sqldb.DB) (string, error) {
	var base string
	err := db.Read.QueryRowContext(ctx, `SELECT base_url FROM instance_base_url WHERE id = 1`).Scan(&base)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return base, wrap("recorded base URL", err)
}
