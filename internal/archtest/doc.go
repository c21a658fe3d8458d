// Package archtest keeps the import rules of room-service true. Its test
// reads the package graph with `go list` and checks it against the table of
// rules in archtest_test.go; the table is the architecture in a few lines.
package archtest
