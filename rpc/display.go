package rpc

import (
	"strings"
	"unicode"
)

// display returns s without control characters and without the Unicode
// bidirectional formatting characters, for text other users see (names,
// titles, notices, URLs): one user's text must not reorder or hide what
// is shown around it (a right-to-left override in a nickname), nor carry
// terminal or log escapes. A notice keeps its line breaks (lines).
func display(s string, lines bool) string {
	drop := func(r rune) bool {
		switch {
		case r == '\n' && lines:
			return false
		case unicode.IsControl(r), r == '\u2028', r == '\u2029':
			return true
		case r == '\u061c', r == '\u200e', r == '\u200f', r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			return true // ALM, LRM, RLM, embeddings and overrides, isolates
		}
		return false
	}
	if strings.IndexFunc(s, drop) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if drop(r) {
			return -1
		}
		return r
	}, s)
}

// displayPtr is display for an optional field.
func displayPtr(s *string, lines bool) *string {
	if s == nil {
		return nil
	}
	v := display(*s, lines)
	return &v
}
