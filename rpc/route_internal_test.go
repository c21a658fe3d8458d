package rpc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestEveryMethodIsRouted reads every method of every service from the
// descriptors: each has a route, a route to the owner names its room, a
// route to a node names the node, and
// one sent again after an unknown outcome is a command with a command_id,
// a read without side effects or a call declared idempotent (Heartbeat).
func TestEveryMethodIsRouted(t *testing.T) {
	everyMethod(t, "routes", routes, func(procedure string, md protoreflect.MethodDescriptor, rte route) {
		in := md.Input().Fields()
		switch {
		case rte.hop != nil && rte.node && in.ByName("node_id") == nil:
			t.Errorf("%s goes to the node it names, but %s has no node_id", procedure, md.Input().FullName())
		case rte.hop != nil && !rte.node && in.ByName("room_id") == nil:
			t.Errorf("%s goes to its room's owner, but %s has no room_id", procedure, md.Input().FullName())
		case rte.node && rte.hop == nil:
			t.Errorf("%s goes to the node it names, but has no hop", procedure)
		}
		if rte.idempotent && in.ByName("command_id") == nil && !readOnly(md) && !declaredIdempotent(md) {
			t.Errorf("%s is retried after an unknown outcome, but it has no command_id and may have side effects", procedure)
		}
	})
}

func readOnly(md protoreflect.MethodDescriptor) bool {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	return ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}

func declaredIdempotent(md protoreflect.MethodDescriptor) bool {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	return ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_IDEMPOTENT
}
