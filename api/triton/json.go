package triton

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// JSON prints m as Triton's HTTP endpoints print model configurations and
// statistics: protobuf field names, enums by name, 64-bit integers as JSON
// numbers (protojson would quote them, which Triton's clients and
// perf_analyzer do not accept), every scalar and repeated field present
// even when zero, a message or oneof field only when set.
func JSON(m proto.Message) []byte {
	return appendMessage(nil, m.ProtoReflect())
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		set := m.Has(fd)
		if !set && (fd.ContainingOneof() != nil || (fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap())) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = strconv.AppendQuote(b, string(fd.Name()))
		b = append(b, ':')
		b = appendField(b, fd, m.Get(fd))
	}
	return append(b, '}')
}

func appendField(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch {
	case fd.IsList():
		l := v.List()
		b = append(b, '[')
		for i := 0; i < l.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, fd, l.Get(i))
		}
		return append(b, ']')
	case fd.IsMap():
		mp := v.Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, k.String())
			b = append(b, ':')
			b = appendValue(b, fd.MapValue(), mp.Get(k))
		}
		return append(b, '}')
	}
	return appendValue(b, fd, v)
}

func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(b, v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return strconv.AppendQuote(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.StringKind:
		s, _ := json.Marshal(v.String())
		return append(b, s...)
	case protoreflect.BytesKind:
		return strconv.AppendQuote(b, base64.StdEncoding.EncodeToString(v.Bytes()))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.AppendQuote(b, fmt.Sprint(f))
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	default: // the signed integer kinds
		return strconv.AppendInt(b, v.Int(), 10)
	}
}
