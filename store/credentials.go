package store

import (
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Credential is one of a sandbox's credentials as the gateway keeps it.
// The placeholder is what the sandbox sees (not a secret); Value is a
// stored credential's (source: {stored: true}) value, "" for the others
// (their sources are read at every start) and once revoked.
type Credential struct {
	Name        string
	Placeholder string
	Value       string
	Expires     time.Time // zero: never
	Revoked     bool
	UpdatedAt   time.Time
}

// ErrNoCredential: the sandbox has no credential of that name.
var ErrNoCredential = errors.New("no such credential")

// putCredentials inserts or replaces creds of sandbox id in tx.
func putCredentials(tx *sql.Tx, id string, creds []Credential, t string) error {
	for _, c := range creds {
		if _, err := tx.Exec(`INSERT INTO credentials (sandbox_id, name, placeholder, value, expires, revoked, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (sandbox_id, name) DO UPDATE SET placeholder=excluded.placeholder, value=excluded.value, expires=excluded.expires, revoked=excluded.revoked, updated_at=excluded.updated_at`,
			id, c.Name, c.Placeholder, c.Value, timeText(c.Expires), c.Revoked, t); err != nil {
			return err
		}
	}
	return nil
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Credentials returns sandbox id's credentials, by name.
func (s *Store) Credentials(id string) ([]Credential, error) {
	rows, err := s.db.Query(`SELECT name, placeholder, value, expires, revoked, updated_at FROM credentials WHERE sandbox_id=? ORDER BY name`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Credential
	for rows.Next() {
		var c Credential
		var exp, upd string
		if err := rows.Scan(&c.Name, &c.Placeholder, &c.Value, &exp, &c.Revoked, &upd); err != nil {
			return nil, err
		}
		c.Expires, _ = time.Parse(time.RFC3339Nano, exp)
		c.UpdatedAt, _ = time.Parse(time.RFC3339Nano, upd)
		out = append(out, c)
	}
	return out, rows.Err()
}

// PutCredentials inserts or replaces credentials of sandbox id (a new
// policy's, before the sandbox is recreated with them).
func (s *Store) PutCredentials(id string, creds []Credential) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := putCredentials(tx, id, creds, now()); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.scrub()
	return nil
}

// KeepCredentials removes sandbox id's credentials whose names are not
// in names (those a new policy dropped), values with them.
func (s *Store) KeepCredentials(id string, names []string) error {
	have, err := s.Credentials(id)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	gone := false
	for _, c := range have {
		if !keep[c.Name] {
			if _, err := s.db.Exec(`DELETE FROM credentials WHERE sandbox_id=? AND name=?`, id, c.Name); err != nil {
				return err
			}
			gone = true
		}
	}
	if gone {
		s.scrub()
	}
	return nil
}

// SetCredential gives sandbox id's credential name a new value and
// expiry (zero: none), which also ends a revocation; the placeholder
// stays.
func (s *Store) SetCredential(id, name, value string, expires time.Time) error {
	return s.changeCredential(`UPDATE credentials SET value=?, expires=?, revoked=0, updated_at=? WHERE sandbox_id=? AND name=?`,
		value, timeText(expires), now(), id, name)
}

// RevokeCredential marks sandbox id's credential name revoked and
// forgets its value.
func (s *Store) RevokeCredential(id, name string) error {
	return s.changeCredential(`UPDATE credentials SET value='', revoked=1, updated_at=? WHERE sandbox_id=? AND name=?`, now(), id, name)
}

func (s *Store) changeCredential(q string, args ...any) error {
	res, err := s.db.Exec(q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w %q", ErrNoCredential, args[len(args)-1])
	}
	s.scrub()
	return nil
}

// scrub checkpoints the WAL into the database and truncates it, after a
// value was replaced or deleted: secure_delete zeroes it in the
// database's pages, but the WAL would otherwise keep the old page until
// it is overwritten. Best effort: a reader holding a snapshot defers it
// to the next write.
func (s *Store) scrub() {
	_, _ = s.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
}
