package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-cdc/sluice/connstr"
)

// Secrets: a password need never be on the command line or in the file.
// For each endpoint (source, target) of a stream the first of these that
// exists supplies the password, which replaces any in the connection
// string:
//
//  1. the file named by source_password_file / target_password_file (key,
//     flag --source-password-file, or SLUICE_SOURCE_PASSWORD_FILE);
//  2. the environment variable SLUICE_<STREAM>_SOURCE_PASSWORD (or
//     _TARGET_PASSWORD), <STREAM> being the stream id in upper case with
//     every character other than a letter or digit replaced by _;
//  3. SLUICE_SOURCE_PASSWORD / SLUICE_TARGET_PASSWORD (every stream);
//  4. systemd credentials (LoadCredential=, under $CREDENTIALS_DIRECTORY):
//     <stream>.source-password, then source-password (and target-…).
//
// A password file's content is the password, one trailing newline removed.

// Getenv is the environment lookup ApplySecrets uses (replaced in tests).
var Getenv = os.Getenv

// EnvName is the per-stream environment variable of an endpoint's
// password: EnvName("eu-orders", "source") = SLUICE_EU_ORDERS_SOURCE_PASSWORD.
func EnvName(stream, endpoint string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(stream) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return "SLUICE_" + b.String() + "_" + strings.ToUpper(endpoint) + "_PASSWORD"
}

// ApplySecrets finds each endpoint's password and puts it into the
// stream's Source and Target. It returns where each came from ("" when the
// connection string is used as given); never the password itself.
func (s *Stream) ApplySecrets() (srcFrom, tgtFrom string, err error) {
	srcFrom, err = applySecret(&s.Source, s.StreamID, "source", s.SourcePasswordFile)
	if err != nil {
		return "", "", err
	}
	tgtFrom, err = applySecret(&s.Target, s.StreamID, "target", s.TargetPasswordFile)
	return srcFrom, tgtFrom, err
}

func applySecret(conn *string, stream, endpoint, file string) (string, error) {
	pw, from, err := findSecret(stream, endpoint, file)
	if err != nil || from == "" {
		return from, err
	}
	c, err := WithPassword(*conn, pw)
	if err != nil {
		return "", fmt.Errorf("stream %s: %s password (from %s): %w", stream, endpoint, from, err)
	}
	*conn = c
	return from, nil
}

func findSecret(stream, endpoint, file string) (pw, from string, err error) {
	if file != "" {
		pw, err := readSecret(file)
		if err != nil {
			return "", "", fmt.Errorf("stream %s: %s_password_file: %w", stream, endpoint, err)
		}
		return pw, "file " + file, nil
	}
	for _, name := range []string{EnvName(stream, endpoint), "SLUICE_" + strings.ToUpper(endpoint) + "_PASSWORD"} {
		if v := Getenv(name); v != "" {
			return v, "$" + name, nil
		}
	}
	if dir := Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		for _, name := range []string{stream + "." + endpoint + "-password", endpoint + "-password"} {
			path := filepath.Join(dir, name)
			pw, err := readSecret(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", "", fmt.Errorf("stream %s: systemd credential: %w", stream, err)
			}
			return pw, "systemd credential " + name, nil
		}
	}
	return "", "", nil
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(string(b), "\n")
	s = strings.TrimSuffix(s, "\r")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// WithPassword returns the connection string with its password replaced,
// in any form connstr accepts (a URL, a PostgreSQL key=value string, a
// MySQL DSN). Its errors never echo the string.
func WithPassword(conn, pw string) (string, error) {
	return connstr.WithPassword(conn, pw)
}
