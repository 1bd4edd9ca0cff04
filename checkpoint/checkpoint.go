// Package checkpoint owns sluice's state file: a bbolt database in the state
// directory holding one record per stream (its durable position, how many
// changes it applied, its last error), and the lock that keeps a second
// sluice off the same directory.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-cdc/sluice"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

const (
	// FileName is the state file inside the state directory.
	FileName = "sluice.db"
	lockName = "sluice.lock"
)

var streamsBucket = []byte("streams")

// Record is what the state file keeps for one stream.
type Record struct {
	Stream   string          `json:"stream"`
	Seq      uint64          `json:"seq"`
	Position sluice.Position `json:"position"`
	Applied  uint64          `json:"applied"`
	// Time is when the position was committed on the target.
	Time time.Time `json:"time"`
	// LastError is the error that last stopped the stream, empty after a
	// successful commit.
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
}

// Checkpoint returns the record's durable progress.
func (r Record) Checkpoint() sluice.Checkpoint {
	return sluice.Checkpoint{Stream: r.Stream, Seq: r.Seq, Position: r.Position, Applied: r.Applied, Time: r.Time}
}

// Store is an open state directory.
type Store struct {
	dir  string
	db   *bolt.DB
	lock *os.File
}

// ErrInUse is returned by Open when another process holds the state dir.
var ErrInUse = errors.New("state dir in use")

// Open locks dir (creating it) and opens its state file. A second Open of the
// same directory, from this process or another, fails at once naming the
// holder's pid.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w (--state-dir must name a directory sluice may create and write)", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		lock.Close()
		if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
			return nil, fmt.Errorf("open state file %s: %w: the file is damaged or not sluice's; move it away and start again: "+
				"each stream then resumes from the checkpoint its target holds (sluice writes it in every target transaction)", path, err)
		}
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(streamsBucket)
		return err
	}); err != nil {
		db.Close()
		lock.Close()
		return nil, fmt.Errorf("initialise state file %s: %w", path, err)
	}
	return &Store{dir: dir, db: db, lock: lock}, nil
}

// lockDir takes an exclusive, non-blocking flock on dir/sluice.lock and
// writes our pid into it. The kernel drops the lock when the process dies,
// so a kill -9 never leaves a stale lock behind.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := "unknown"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			pid = strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: state dir %s is in use by another sluice (pid %s); stop it or use another --state-dir", ErrInUse, dir, pid)
		}
		return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the state file and the lock.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.lock != nil {
		_ = s.lock.Truncate(0)
		s.lock.Close()
	}
	return err
}

// Get returns the stream's record, false if it has none.
func (s *Store) Get(stream string) (Record, bool, error) {
	var r Record
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(streamsBucket).Get([]byte(stream))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("read checkpoint of stream %s: %w", stream, err)
	}
	return r, found, nil
}

// List returns every stream's record.
func (s *Store) List() ([]Record, error) {
	var out []Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(streamsBucket).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("stream %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", s.dir, err)
	}
	return out, nil
}

// Commit records a checkpoint that the target has committed. Call it only
// after the target commit returned: the state file must never be ahead of
// the target. It clears the stream's last error.
func (s *Store) Commit(cp sluice.Checkpoint) error {
	return s.update(cp.Stream, func(r *Record) {
		r.Seq = cp.Seq
		r.Position = cp.Position
		r.Applied = cp.Applied
		r.Time = cp.Time
		r.LastError = ""
		r.LastErrorTime = time.Time{}
	})
}

// SetError records the error that stopped a stream.
func (s *Store) SetError(stream string, msg string) error {
	return s.update(stream, func(r *Record) {
		r.LastError = msg
		r.LastErrorTime = time.Now().UTC()
	})
}

func (s *Store) update(stream string, f func(*Record)) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(streamsBucket)
		var r Record
		if v := b.Get([]byte(stream)); v != nil {
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
		}
		r.Stream = stream
		f(&r)
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put([]byte(stream), v)
	})
	if err != nil {
		return fmt.Errorf("write checkpoint of stream %s: %w", stream, err)
	}
	return nil
}

// ReadOnly opens dir's state file for reading without taking the directory
// lock, for `sync status`. bbolt's own shared flock still waits for a running
// daemon to release the file, so this fails with ErrInUse while one runs.
func ReadOnly(dir string) (*Store, error) {
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 300 * time.Millisecond})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: state file %s is held by a running sluice", ErrInUse, path)
		}
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	return &Store{dir: dir, db: db}, nil
}
