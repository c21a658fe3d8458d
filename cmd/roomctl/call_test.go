package main

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// TestCallKnowsEveryMethod: "roomctl call" has an entry for every RPC of
// the API's services, so a new RPC cannot be left out of it.
func TestCallKnowsEveryMethod(t *testing.T) {
	table := methods(newClient(options{addr: "http://127.0.0.1:1"}))
	services := roomv1.File_room_v1_room_proto.Services()
	n := 0
	for i := range services.Len() {
		ms := services.Get(i).Methods()
		for j := range ms.Len() {
			m := ms.Get(j)
			n++
			if _, ok := table[string(m.Name())]; !ok {
				t.Errorf("roomctl call does not know %s", protoreflect.FullName(m.FullName()))
			}
		}
	}
	if len(table) != n {
		t.Errorf("roomctl call has %d methods, the services %d", len(table), n)
	}
}
