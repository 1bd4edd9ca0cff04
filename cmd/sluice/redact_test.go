package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// TestRedactHandler: a password that reaches a log line in the message, a
// string, an error, a group or a logger's With attributes is masked, in
// both output formats.
func TestRedactHandler(t *testing.T) {
	const pw = "l0g p@ss/✓"
	conn := "postgres://" + url.UserPassword("app", pw).String() + "@db/x"
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			var h slog.Handler = slog.NewTextHandler(&buf, nil)
			if format == "json" {
				h = slog.NewJSONHandler(&buf, nil)
			}
			secrets := &secretSet{}
			log := slog.New(redactHandler{h, secrets})
			secrets.addConn(conn) // known after the logger is made, as in syncStart
			log.With("conn", conn).WithGroup("g").Error("failed: password="+pw,
				"err", fmt.Errorf("connect: %w", errors.New("bad password "+pw)),
				"raw", pw, slog.Group("inner", "url", conn))
			out := buf.String()
			for _, leak := range encodings(pw) {
				if strings.Contains(out, leak) {
					t.Fatalf("log line holds the password as %q:\n%s", leak, out)
				}
			}
			if !strings.Contains(out, "xxxxx") || !strings.Contains(out, "failed") {
				t.Errorf("want the line, masked: %s", out)
			}
		})
	}
}
