package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"hyapp/room-service/room"
)

// strictCodec decodes requests strictly and lets a refusal carry our
// ErrorInfo reason. It serves binary protobuf (named "proto", also what
// gRPC uses) or protojson (any other name).
//
// Strict means a request is refused (malformed_request) when it is not a
// valid encoding of its message: bad JSON, a value of the wrong type, a
// number out of its field's range, invalid UTF-8, an unknown enum name,
// and a field the message does not have. Unknown fields are refused on
// purpose, in both encodings: a misspelt JSON name ("operater_user_id")
// would otherwise be dropped and act as 0, and a field sent by a client
// built on a newer schema would otherwise be ignored, so a command would
// run differently than its caller meant. The price is that clients may
// only set a new field once every server knows it: deploy servers first.
// (Numeric enum values the schema does not name still decode, as proto3
// open enums do; the handlers refuse those they do not accept.)
//
// Connect wraps any error a codec returns in its own invalid_argument error
// and drops that error's details, so an error returned here could not
// carry a reason. Instead, a request that fails to decode is handed on
// empty, with the decode error in an unknown field (see markMalformed), and
// refuseMalformed, the first interceptor, refuses it before any handler
// runs. No successfully decoded request has unknown fields, so the mark
// cannot be mistaken for data.
type strictCodec struct{ name string }

// strictCodecs replace connect's codecs of the same names on a handler.
func strictCodecs() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(strictCodec{"proto"}),
		connect.WithCodec(strictCodec{"json"}),
		connect.WithCodec(strictCodec{"json; charset=utf-8"}),
	)
}

// Name implements connect.Codec.
func (c strictCodec) Name() string { return c.name }

func (c strictCodec) json() bool { return c.name != "proto" }

// Marshal implements connect.Codec.
func (c strictCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

// MarshalAppend appends v's encoding to dst. Connect prefers it to
// Marshal: an answer is encoded into a buffer of its pool instead of a
// slice allocated (and cleared) for each.
func (c strictCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", v)
	}
	if c.json() {
		return protojson.MarshalOptions{}.MarshalAppend(dst, m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

// Unmarshal implements connect.Codec. It fails only for a value that is
// not a protobuf message (a bug); a request that does not decode is marked
// instead (see strictCodec).
func (c strictCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a protobuf message", v)
	}
	var err error
	if c.json() {
		err = protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(data, m)
	} else if err = proto.Unmarshal(data, m); err == nil && hasUnknown(m.ProtoReflect()) {
		err = errors.New("the request has a field this service does not know")
	}
	if err != nil {
		markMalformed(m, err)
	}
	return nil
}

// malformedField is the field number of the mark markMalformed leaves.
const malformedField = protowire.MaxValidNumber

// markMalformed empties m and leaves why in its unknown fields.
func markMalformed(m proto.Message, why error) {
	proto.Reset(m)
	b := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(b, why.Error()))
}

// malformed reports whether the codec refused m, and why.
func malformed(m proto.Message) (string, bool) {
	u := m.ProtoReflect().GetUnknown()
	if len(u) == 0 {
		return "", false
	}
	if num, typ, n := protowire.ConsumeTag(u); n > 0 && num == malformedField && typ == protowire.BytesType {
		if why, k := protowire.ConsumeString(u[n:]); k > 0 {
			return why, true
		}
	}
	return "the request could not be decoded", true
}

// hasUnknown reports whether m, or a message inside it, has unknown fields.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	if !nests(m.Descriptor()) {
		return false // most requests: no walk through their fields
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = hasUnknown(mv.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && !found; i++ {
				found = hasUnknown(v.List().Get(i).Message())
			}
		case !fd.IsMap() && !fd.IsList() && fd.Message() != nil:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// refuseMalformed refuses, with malformed_request, a request the codec
// could not decode. It must be the first interceptor.
func refuseMalformed(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if m, ok := req.Any().(proto.Message); ok {
				if why, bad := malformed(m); bad {
					return nil, toConnect(ctx, log, room.Errorf(room.ErrMalformedRequest, "%s: %s", req.Spec().Procedure, why))
				}
			}
			return next(ctx, req)
		}
	}
}

// nesting remembers, by message descriptor, whether nests.
var nesting sync.Map

// nests reports whether a message of d has fields that hold messages
// (maps of them, lists of them).
func nests(d protoreflect.MessageDescriptor) bool {
	if v, ok := nesting.Load(d); ok {
		return v.(bool)
	}
	n := false
	for i, fs := 0, d.Fields(); i < fs.Len() && !n; i++ {
		f := fs.Get(i)
		n = f.Message() != nil || (f.IsMap() && f.MapValue().Message() != nil)
	}
	nesting.Store(d, n)
	return n
}
