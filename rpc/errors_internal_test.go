package rpc

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"hyapp/room-service/room"
)

// domainCodes reads every constant of type Code declared in package room's
// source, so a code added there without a row in the table fails this test.
func domainCodes(t *testing.T) []room.Code {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../room/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []room.Code
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("room.Code constant with a value that is not a string literal: %#v", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, room.Code(s))
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no room.Code constants in ../room/errors.go")
	}
	return out
}

func TestEveryCodeMapsToADistinctTransportCode(t *testing.T) {
	domain := domainCodes(t)
	seen := map[connect.Code]room.Code{}
	for _, c := range domain {
		tc, ok := codes[c]
		if !ok {
			t.Errorf("room.Code %q has no entry in the codes table", c)
			continue
		}
		if prev, dup := seen[tc]; dup {
			t.Errorf("room.Code %q and %q both map to %v", prev, c, tc)
		}
		seen[tc] = c
		if tc == 0 || tc == connect.CodeUnknown {
			t.Errorf("room.Code %q maps to %v", c, tc)
		}
	}
	if len(codes) != len(domain) {
		t.Errorf("the codes table has %d entries for %d domain codes", len(codes), len(domain))
	}
}

func TestToConnectCarriesTheReason(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for c, want := range codes {
		err := toConnect(t.Context(), quiet, &room.Error{Code: c, Reason: "some_reason", Message: "detail"})
		if connect.CodeOf(err) != want || Reason(err) != "some_reason" {
			t.Errorf("code %q: got %v, reason %q", c, err, Reason(err))
		}
	}
}

func TestToConnectHidesInternalText(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := toConnect(t.Context(), quiet, errors.New("dial tcp 10.0.0.7:3306: secret-host"))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInternal || Reason(err) != "internal" || strings.Contains(ce.Message(), "secret-host") {
		t.Fatalf("got %v (reason %q)", err, Reason(err))
	}
}
