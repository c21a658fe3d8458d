package rpc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestEveryMethodHasAnAccessRow reads every method of every service from
// the descriptors: each has a row in accessTable, a row whose actor reads
// a field names a method whose request has that field, and no row names
// a method no service has.
func TestEveryMethodHasAnAccessRow(t *testing.T) {
	everyMethod(t, "accessTable", accessTable, func(procedure string, md protoreflect.MethodDescriptor, a access) {
		in := md.Input().Fields()
		if a.actor != nil && in.ByName("operator_user_id") == nil && in.ByName("user_id") == nil {
			t.Errorf("%s acts for a user, but %s names none", procedure, md.Input().FullName())
		}
		if a.actor == nil && in.ByName("operator_user_id") != nil {
			t.Errorf("%s has an operator_user_id but acts for nobody: a caller could name anyone", procedure)
		}
	})
}
