// Package store is the gateway's durable state: sandboxes and their events
// in SQLite (modernc.org/sqlite, pure Go), with versioned migrations.
// Every change is a compare-and-swap on the sandbox's resource version, so
// two writers cannot both win; the gateway writes its intent (phase,
// desired) before it acts, so a restart knows what was under way.
package store

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// ErrNotFound: no sandbox with that id. ErrStale: the resource version
// did not match (someone else changed it first).
var (
	ErrNotFound = errors.New("not found")
	ErrStale    = errors.New("stale resource version")
	// ErrNameTaken: Insert of a name another sandbox has.
	ErrNameTaken = errors.New("name taken")
)

// Phases a sandbox moves through (docs/gateway.md).
const (
	PhaseProvisioning = "provisioning"
	PhaseReady        = "ready"
	PhaseStopping     = "stopping"
	PhaseStopped      = "stopped"
	PhaseError        = "error"
	PhaseDeleting     = "deleting"
)

// Sandbox is one stored sandbox. Layers and Losses are JSON documents
// (the provider's layer statuses and loss report).
type Sandbox struct {
	ID         string
	Provider   string
	Phase      string
	Reason     string
	Desired    string // running, stopped, deleted
	Version    int64  // resource version: 1 on insert, +1 on every update
	PolicyYAML string
	PolicyHash string
	// PolicyRevision is the revision (PolicyRevisions) in force.
	PolicyRevision int64
	Image          string
	Workdir        string
	Layers         string // JSON
	Losses         string // JSON
	// ProviderState is the provider's opaque state of a persistent
	// sandbox (provider.Persistent.State), handed back to its Recover.
	ProviderState string
	// Name is the caller's name for the sandbox (unique when not empty).
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Event is one line of a sandbox's history.
type Event struct {
	Seq     int64
	Time    time.Time
	Kind    string
	Message string
}

// migrations are applied in order; the index+1 is the schema version
// recorded in schema_migrations. Never edit one that shipped: append.
var migrations = []string{
	`CREATE TABLE sandboxes (
		id TEXT PRIMARY KEY,
		provider TEXT NOT NULL,
		phase TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		desired TEXT NOT NULL,
		version INTEGER NOT NULL,
		policy_yaml TEXT NOT NULL,
		policy_hash TEXT NOT NULL,
		image TEXT NOT NULL DEFAULT '',
		workdir TEXT NOT NULL,
		layers TEXT NOT NULL DEFAULT '[]',
		losses TEXT NOT NULL DEFAULT '[]',
		created_at TEXT NOT NULL,
		updated_at TEXT NOT NULL
	);
	CREATE TABLE events (
		sandbox_id TEXT NOT NULL,
		seq INTEGER NOT NULL,
		time TEXT NOT NULL,
		kind TEXT NOT NULL,
		message TEXT NOT NULL,
		PRIMARY KEY (sandbox_id, seq)
	);`,
	`CREATE TABLE policy_revisions (
		sandbox_id TEXT NOT NULL,
		revision INTEGER NOT NULL,
		policy_yaml TEXT NOT NULL,
		policy_hash TEXT NOT NULL,
		applied TEXT NOT NULL,
		created_at TEXT NOT NULL,
		PRIMARY KEY (sandbox_id, revision)
	);
	ALTER TABLE sandboxes ADD COLUMN policy_revision INTEGER NOT NULL DEFAULT 1;`,
	// Docker sandboxes made before the column are recovered by id, which
	// is the docker provider's whole state.
	`ALTER TABLE sandboxes ADD COLUMN provider_state TEXT NOT NULL DEFAULT '';
	UPDATE sandboxes SET provider_state = '{"id":"' || id || '"}' WHERE provider = 'docker';`,
	`ALTER TABLE sandboxes ADD COLUMN name TEXT NOT NULL DEFAULT '';
	CREATE UNIQUE INDEX sandboxes_name ON sandboxes (name) WHERE name != '';`,
	// A sandbox's credentials: every one's placeholder (kept across
	// restarts and recreates), a stored one's value, and what rotation,
	// expiry and revocation made of it.
	`CREATE TABLE credentials (
		sandbox_id TEXT NOT NULL,
		name TEXT NOT NULL,
		placeholder TEXT NOT NULL,
		value TEXT NOT NULL DEFAULT '',
		expires TEXT NOT NULL DEFAULT '',
		revoked INTEGER NOT NULL DEFAULT 0,
		updated_at TEXT NOT NULL,
		PRIMARY KEY (sandbox_id, name)
	);`,
}

// Store is an open database.
type Store struct {
	db   *sql.DB
	path string
}

// Open opens (creating it and its directory, 0700) the database at path
// and applies pending migrations. The database and its WAL and shared
// memory files are made 0600 whatever they were: they hold credential
// values. Deleted rows are overwritten (secure_delete), so a rotated or
// revoked value does not stay in the file's free pages.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return nil, err
	} else {
		f.Close()
	}
	// SQLite makes the -wal and -shm files with the database's mode.
	if err := ownerOnly(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(ON)")
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: path}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	return s, nil
}

// ownerOnly takes group and other access away from the database and its
// WAL and shared-memory files (a database made by an older corral, or
// copied in with a looser mode).
func ownerOnly(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("store %s is not a regular file", p)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("store %s: %w", p, err)
			}
		}
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// SchemaVersion is the version the database is at.
func (s *Store) SchemaVersion() (int, error) {
	var v int
	err := s.db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

func (s *Store) migrate() error {
	if _, err := s.db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return err
	}
	cur, err := s.SchemaVersion()
	if err != nil {
		return err
	}
	if cur > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this corral knows (%d): use a newer corral", cur, len(migrations))
	}
	for v := cur + 1; v <= len(migrations); v++ {
		tx, err := s.db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(migrations[v-1]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, now()); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

const columns = `id, provider, phase, reason, desired, version, policy_yaml, policy_hash, policy_revision, image, workdir, layers, losses, provider_state, name, created_at, updated_at`

func scan(row interface{ Scan(...any) error }) (Sandbox, error) {
	var sb Sandbox
	var created, updated string
	err := row.Scan(&sb.ID, &sb.Provider, &sb.Phase, &sb.Reason, &sb.Desired, &sb.Version, &sb.PolicyYAML, &sb.PolicyHash, &sb.PolicyRevision, &sb.Image, &sb.Workdir, &sb.Layers, &sb.Losses, &sb.ProviderState, &sb.Name, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return sb, ErrNotFound
	}
	sb.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
	sb.UpdatedAt, _ = time.Parse(time.RFC3339Nano, updated)
	return sb, err
}

// Insert stores a new sandbox at version 1 (its CreatedAt/UpdatedAt are
// set now), with its credentials, and returns it.
func (s *Store) Insert(sb Sandbox, creds ...Credential) (Sandbox, error) {
	t := now()
	sb.Version, sb.PolicyRevision = 1, 1
	if sb.Layers == "" {
		sb.Layers = "[]"
	}
	if sb.Losses == "" {
		sb.Losses = "[]"
	}
	tx, err := s.db.Begin()
	if err != nil {
		return sb, err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO sandboxes (`+columns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		sb.ID, sb.Provider, sb.Phase, sb.Reason, sb.Desired, sb.Version, sb.PolicyYAML, sb.PolicyHash, sb.PolicyRevision, sb.Image, sb.Workdir, sb.Layers, sb.Losses, sb.ProviderState, sb.Name, t, t); err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed: sandboxes.name") {
			return sb, fmt.Errorf("%w: a sandbox is named %q already", ErrNameTaken, sb.Name)
		}
		return sb, err
	}
	if _, err := tx.Exec(`INSERT INTO policy_revisions (sandbox_id, revision, policy_yaml, policy_hash, applied, created_at) VALUES (?, 1, ?, ?, 'created', ?)`,
		sb.ID, sb.PolicyYAML, sb.PolicyHash, t); err != nil {
		return sb, err
	}
	if err := putCredentials(tx, sb.ID, creds, t); err != nil {
		return sb, err
	}
	if err := tx.Commit(); err != nil {
		return sb, err
	}
	return s.Get(sb.ID)
}

// Get returns one sandbox.
func (s *Store) Get(id string) (Sandbox, error) {
	return scan(s.db.QueryRow(`SELECT `+columns+` FROM sandboxes WHERE id = ?`, id))
}

// IDByName returns the id of the sandbox named name (ErrNotFound when
// none is).
func (s *Store) IDByName(name string) (string, error) {
	var id string
	err := s.db.QueryRow(`SELECT id FROM sandboxes WHERE name = ? AND name != ''`, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	return id, err
}

// List returns every sandbox, oldest first.
func (s *Store) List() ([]Sandbox, error) {
	rows, err := s.db.Query(`SELECT ` + columns + ` FROM sandboxes ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// Update applies change to the sandbox at version expect and stores it at
// expect+1, atomically: ErrStale when the stored version is not expect,
// ErrNotFound when there is no such sandbox.
func (s *Store) Update(id string, expect int64, change func(*Sandbox)) (Sandbox, error) {
	sb, err := s.Get(id)
	if err != nil {
		return sb, err
	}
	if sb.Version != expect {
		return sb, ErrStale
	}
	change(&sb)
	res, err := s.db.Exec(`UPDATE sandboxes SET phase=?, reason=?, desired=?, version=version+1, policy_yaml=?, policy_hash=?, policy_revision=?, image=?, layers=?, losses=?, provider_state=?, updated_at=?
		WHERE id=? AND version=?`, sb.Phase, sb.Reason, sb.Desired, sb.PolicyYAML, sb.PolicyHash, sb.PolicyRevision, sb.Image, sb.Layers, sb.Losses, sb.ProviderState, now(), id, expect)
	if err != nil {
		return sb, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return sb, ErrStale
	}
	return s.Get(id)
}

// Delete removes the sandbox (and its events) if it is at version expect.
func (s *Store) Delete(id string, expect int64) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.Exec(`DELETE FROM sandboxes WHERE id=? AND version=?`, id, expect)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := s.Get(id); errors.Is(err, ErrNotFound) {
			return ErrNotFound
		}
		return ErrStale
	}
	for _, table := range []string{"events", "policy_revisions", "credentials"} {
		if _, err := tx.Exec(`DELETE FROM `+table+` WHERE sandbox_id=?`, id); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.scrub()
	return nil
}

// AddEvent appends an event to the sandbox's history.
func (s *Store) AddEvent(id, kind, message string) error {
	_, err := s.db.Exec(`INSERT INTO events (sandbox_id, seq, time, kind, message)
		VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE sandbox_id = ?), ?, ?, ?)`, id, id, now(), kind, message)
	return err
}

// Events returns the sandbox's events after seq after (0: its whole
// history), oldest first.
func (s *Store) Events(id string, after int64) ([]Event, error) {
	rows, err := s.db.Query(`SELECT seq, time, kind, message FROM events WHERE sandbox_id=? AND seq>? ORDER BY seq`, id, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var t string
		if err := rows.Scan(&e.Seq, &t, &e.Kind, &e.Message); err != nil {
			return nil, err
		}
		e.Time, _ = time.Parse(time.RFC3339Nano, t)
		out = append(out, e)
	}
	return out, rows.Err()
}

// Revision is one stored policy of a sandbox.
type Revision struct {
	Revision   int64
	PolicyYAML string
	PolicyHash string
	Applied    string // created, live, recreated
	CreatedAt  time.Time
}

// SetPolicy stores a new policy revision for the sandbox at version
// expect and makes it the one in force, with change applied to the record
// in the same transaction (compare-and-swap as Update). It returns the
// record and the new revision number.
func (s *Store) SetPolicy(id string, expect int64, yaml, hash, applied string, change func(*Sandbox)) (Sandbox, int64, error) {
	sb, err := s.Get(id)
	if err != nil {
		return sb, 0, err
	}
	if sb.Version != expect {
		return sb, 0, ErrStale
	}
	rev := sb.PolicyRevision + 1
	change(&sb)
	tx, err := s.db.Begin()
	if err != nil {
		return sb, 0, err
	}
	defer tx.Rollback()
	t := now()
	res, err := tx.Exec(`UPDATE sandboxes SET phase=?, reason=?, desired=?, version=version+1, policy_yaml=?, policy_hash=?, policy_revision=?, image=?, layers=?, losses=?, provider_state=?, updated_at=?
		WHERE id=? AND version=?`, sb.Phase, sb.Reason, sb.Desired, yaml, hash, rev, sb.Image, sb.Layers, sb.Losses, sb.ProviderState, t, id, expect)
	if err != nil {
		return sb, 0, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return sb, 0, ErrStale
	}
	if _, err := tx.Exec(`INSERT INTO policy_revisions (sandbox_id, revision, policy_yaml, policy_hash, applied, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		id, rev, yaml, hash, applied, t); err != nil {
		return sb, 0, err
	}
	if err := tx.Commit(); err != nil {
		return sb, 0, err
	}
	sb, err = s.Get(id)
	return sb, rev, err
}

// Revisions returns the sandbox's policy history, oldest first.
func (s *Store) Revisions(id string) ([]Revision, error) {
	rows, err := s.db.Query(`SELECT revision, policy_yaml, policy_hash, applied, created_at FROM policy_revisions WHERE sandbox_id=? ORDER BY revision`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Revision
	for rows.Next() {
		var r Revision
		var t string
		if err := rows.Scan(&r.Revision, &r.PolicyYAML, &r.PolicyHash, &r.Applied, &t); err != nil {
			return nil, err
		}
		r.CreatedAt, _ = time.Parse(time.RFC3339Nano, t)
		out = append(out, r)
	}
	return out, rows.Err()
}
