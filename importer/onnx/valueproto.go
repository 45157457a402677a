package onnx

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
	"google.golang.org/protobuf/encoding/protowire"
)

// Value is a value of an ONNX graph input or output: a tensor, a sequence
// of values or an optional value. It is what a serialized TensorProto,
// SequenceProto or OptionalProto (the input_0.pb files of the ONNX backend
// test data) holds.
type Value struct {
	Kind TypeKind // TypeTensor, TypeSequence or TypeOptional
	// Tensor is set for TypeTensor.
	Tensor *tensor.Tensor
	// Elems are a sequence's elements, in order.
	Elems []*Value
	// Elem is an optional's content, nil when it holds none.
	Elem *Value
}

// TensorValue wraps a tensor as a Value.
func TensorValue(t *tensor.Tensor) *Value { return &Value{Kind: TypeTensor, Tensor: t} }

// Flatten returns the tensors of v in order: a tensor itself, a sequence's
// elements' tensors one after another, an optional's content's tensors or
// none. It is how the importer lays out sequence and optional graph inputs
// and outputs as tensors (see ImportOptions).
func (v *Value) Flatten() []*tensor.Tensor {
	switch v.Kind {
	case TypeTensor:
		return []*tensor.Tensor{v.Tensor}
	case TypeSequence:
		var out []*tensor.Tensor
		for _, e := range v.Elems {
			out = append(out, e.Flatten()...)
		}
		return out
	case TypeOptional:
		if v.Elem != nil {
			return v.Elem.Flatten()
		}
	}
	return nil
}

// DecodeValue decodes a serialized value of type t: a TensorProto for a
// tensor type, a SequenceProto for a sequence type, an OptionalProto for an
// optional type. Sparse tensors and maps are unsupported.
func DecodeValue(data []byte, t *TypeInfo) (*Value, error) {
	d := newProtoDecoder(DecodeOptions{}, false)
	defer d.close()
	v, err := d.value(data, t, 0)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return v, nil
}

func (d *protoDecoder) value(data []byte, t *TypeInfo, depth int) (*Value, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: value of unknown type", ErrUnsupported)
	}
	if depth > 8 {
		return nil, fmt.Errorf("%w: values nested more than 8 deep", ErrUnsupported)
	}
	switch t.Kind {
	case TypeTensor:
		tt, name, err := d.tensor(data)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		return TensorValue(tt), nil
	case TypeSequence, TypeOptional:
		return d.container(data, t, depth)
	}
	return nil, fmt.Errorf("%w: value of type %v", ErrUnsupported, t.Kind)
}

// container decodes a SequenceProto or an OptionalProto; both keep tensors
// in field 3, sequences in field 5 and optionals in field 7.
func (d *protoDecoder) container(data []byte, t *TypeInfo, depth int) (*Value, error) {
	v := &Value{Kind: t.Kind}
	what := map[TypeKind]string{TypeSequence: "sequence", TypeOptional: "optional"}[t.Kind]
	err := eachWireField(data, func(f wireField) error {
		var kind TypeKind
		switch f.num {
		case 3:
			kind = TypeTensor
		case 5:
			kind = TypeSequence
		case 7:
			kind = TypeOptional
		case 4, 6:
			return fmt.Errorf("%w: %s of sparse tensors or maps", ErrUnsupported, what)
		default:
			return nil
		}
		if err := f.want(what+" element", protowire.BytesType); err != nil {
			return err
		}
		et := t.ElemType
		if et == nil {
			et = &TypeInfo{Kind: kind}
		}
		if et.Kind != kind {
			return fmt.Errorf("%s holds a %v where its type says %v", what, kind, et.Kind)
		}
		e, err := d.value(f.b, et, depth+1)
		if err != nil {
			return err
		}
		if t.Kind == TypeOptional {
			v.Elem = e
		} else {
			v.Elems = append(v.Elems, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}
