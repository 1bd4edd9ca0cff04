package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/sluice-cdc/sluice/tablecopy"
)

// State is how far a run got, so that an interrupted run resumes: per
// table its first ranges (as cut when the run began, so that a resume
// hashes the same ones), which of them were found equal, those that were
// not (still to be narrowed down), and the report of each table done.
// A resumed run trusts what the interrupted one found: a range equal then
// is not hashed again.
type State struct {
	// Run names what is compared (the source, the target, the tables);
	// a state of another run is not resumed.
	Run    string                 `json:"run"`
	Tables map[string]*TableState `json:"tables"`

	mu   sync.Mutex
	path string
}

// TableState is one table's progress.
type TableState struct {
	Ranges   []stateRange `json:"ranges"`
	Done     []bool       `json:"done"`
	Rows     int64        `json:"rows"`
	Suspects []stateRange `json:"suspects,omitempty"`
	// SourceRows and TargetRows sum the done ranges'.
	SourceRows int64        `json:"source_rows"`
	TargetRows int64        `json:"target_rows"`
	Finished   *TableReport `json:"finished,omitempty"`
}

type stateRange struct {
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	Src  int64  `json:"src,omitempty"`
	Tgt  int64  `json:"tgt,omitempty"`
}

func encodeRange(r tablecopy.Range) stateRange {
	return stateRange{From: tablecopy.EncodeBound(r.From), To: tablecopy.EncodeBound(r.To)}
}

func (s stateRange) decode() (tablecopy.Range, error) {
	from, err := tablecopy.DecodeBound(s.From)
	if err != nil {
		return tablecopy.Range{}, err
	}
	to, err := tablecopy.DecodeBound(s.To)
	return tablecopy.Range{From: from, To: to}, err
}

// LoadState reads the state file at path for run, or starts a new one
// there when the file does not exist. A file of another run is refused
// rather than overwritten.
func LoadState(path, run string) (*State, error) {
	st := &State{Run: run, Tables: map[string]*TableState{}, path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, st.save()
	}
	if err != nil {
		return nil, fmt.Errorf("read verify state %s: %w", path, err)
	}
	var old State
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("verify state %s is not a verify state file (%v): remove it to start over", path, err)
	}
	if old.Run != run {
		return nil, fmt.Errorf("verify state %s is of another run (%s): use another file, or remove it to start over", path, old.Run)
	}
	if old.Tables == nil {
		old.Tables = map[string]*TableState{}
	}
	old.path = path
	return &old, nil
}

// save writes the state whole, to a new file renamed over the old one,
// so that a kill leaves the old state or the new one.
func (s *State) save() error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write verify state %s: %w (check that %s is writable)", s.path, err, filepath.Dir(s.path))
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("write verify state %s: %w", s.path, err)
	}
	return nil
}

// Remove deletes the state file: the run is complete.
func (s *State) Remove() error {
	if s == nil {
		return nil
	}
	return os.Remove(s.path)
}

// update changes the state under its lock and saves it.
func (s *State) update(f func()) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	return s.save()
}
