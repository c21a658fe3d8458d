package rpc

import (
	"testing"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// TestEveryMethodHasAnAccessRow reads every method of every service from
// the descriptors: each has a row in accessTable, a row whose actor reads
// a field names a method whose request has that field, and no row names
// a method no service has.
func TestEveryMethodHasAnAccessRow(t *testing.T) {
	seen := map[string]bool{}
	services := roomv1.File_room_v1_room_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			md := methods.Get(j)
			procedure := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
			seen[procedure] = true
			a, ok := accessTable[procedure]
			if !ok {
				t.Errorf("%s has no scope: add it to accessTable", procedure)
				continue
			}
			in := md.Input().Fields()
			if a.actor != nil && in.ByName("operator_user_id") == nil && in.ByName("user_id") == nil {
				t.Errorf("%s acts for a user, but %s names none", procedure, md.Input().FullName())
			}
			if a.actor == nil && in.ByName("operator_user_id") != nil {
				t.Errorf("%s has an operator_user_id but acts for nobody: a caller could name anyone", procedure)
			}
		}
	}
	for procedure := range accessTable {
		if !seen[procedure] {
			t.Errorf("accessTable names %s, which no service has", procedure)
		}
	}
}
