package rpc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// everyMethod reads every method of every service from the descriptors
// and calls check with the row table holds for it. A method without a row
// fails the test, and so does a row naming a method no service has: a new
// RPC cannot be forgotten in the table, nor a removed one left in it.
func everyMethod[V any](t *testing.T, name string, table map[string]V, check func(procedure string, md protoreflect.MethodDescriptor, row V)) {
	t.Helper()
	seen := map[string]bool{}
	services := roomv1.File_room_v1_room_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			md := methods.Get(j)
			procedure := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
			seen[procedure] = true
			row, ok := table[procedure]
			if !ok {
				t.Errorf("%s has no row in %s: add it", procedure, name)
				continue
			}
			check(procedure, md, row)
		}
	}
	for procedure := range table {
		if !seen[procedure] {
			t.Errorf("%s names %s, which no service has", name, procedure)
		}
	}
}
