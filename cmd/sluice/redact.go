package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sluice-cdc/sluice/connstr"
)

// secretSet holds the passwords the process knows (from connection
// strings, password files, variables and credentials), for redactHandler.
// Passwords become known after the logger is made, when each stream's
// secrets are applied, and again on every reload.
type secretSet struct {
	mu  sync.RWMutex
	pws []string
}

func (s *secretSet) add(pws ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
next:
	for _, pw := range pws {
		if len(pw) < 3 { // too short to find without masking ordinary words
			continue
		}
		for _, have := range s.pws {
			if have == pw {
				continue next
			}
		}
		s.pws = append(s.pws, pw)
	}
}

// addConn adds the passwords of connection strings.
func (s *secretSet) addConn(conns ...string) {
	for _, c := range conns {
		if pw, ok := connstr.Password(c); ok {
			s.add(pw)
		}
	}
}

func (s *secretSet) redact(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.pws) == 0 {
		return text
	}
	return connstr.Redact(text, s.pws...)
}

// redactHandler removes every known password from a log line's message
// and attributes before it is written: a driver's error may quote a
// connection string, and sluice's own masking cannot see inside it.
type redactHandler struct {
	slog.Handler
	secrets *secretSet
}

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.secrets.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.secrets.redact(v.String()))
	case slog.KindGroup:
		as := v.Group()
		out := make([]any, len(as))
		for i, g := range as {
			out[i] = h.attr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.secrets.redact(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, h.secrets.redact(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return redactHandler{h.Handler.WithAttrs(red), h.secrets}
}

func (h redactHandler) WithGroup(g string) slog.Handler {
	return redactHandler{h.Handler.WithGroup(g), h.secrets}
}
