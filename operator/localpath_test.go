package operator

import (
	"slices"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func TestRegistryLocalPaths(t *testing.T) {
	r := MustRegistry()
	for _, tc := range []struct {
		op   *pb.Operator
		want []LocalPath
	}{
		{&pb.Operator{Name: "out", Type: "file", Config: []byte(`{"path":"out/x"}`), InputSchema: &pb.Schema{}},
			[]LocalPath{{Field: "path", Path: "out/x", Output: true}}},
		{&pb.Operator{Name: "numbers", Type: "sequence", Config: []byte(`{"from":1,"to":2}`)}, nil},
	} {
		got, err := r.LocalPaths(tc.op)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("LocalPaths(%s) = %v, %v; want %v", tc.op.GetType(), got, err, tc.want)
		}
	}
	if _, err := r.LocalPaths(&pb.Operator{Name: "x", Type: "nope"}); err == nil {
		t.Errorf("LocalPaths(unregistered type) = nil error")
	}
	if _, err := r.LocalPaths(&pb.Operator{Name: "out", Type: "file", Config: []byte(`{`)}); err == nil {
		t.Errorf("LocalPaths(undecodable configuration) = nil error")
	}
}

// TestRegistryLocations: a file sink on s3:// names a location and no local path; one on a
// directory names no location.
func TestRegistryLocations(t *testing.T) {
	r := MustRegistry()
	s3 := &pb.Operator{Name: "out", Type: "file", Config: []byte(`{"path":"s3://b/p"}`), InputSchema: &pb.Schema{}}
	if got, err := r.Locations(s3); err != nil || !slices.Equal(got, []Location{{Field: "path", URI: "s3://b/p", Output: true}}) {
		t.Errorf("Locations(file on s3://) = %v, %v", got, err)
	}
	if got, err := r.LocalPaths(s3); err != nil || len(got) != 0 {
		t.Errorf("LocalPaths(file on s3://) = %v, %v; want none", got, err)
	}
	local := &pb.Operator{Name: "out", Type: "file", Config: []byte(`{"path":"out/x"}`), InputSchema: &pb.Schema{}}
	if got, err := r.Locations(local); err != nil || len(got) != 0 {
		t.Errorf("Locations(file on a directory) = %v, %v; want none", got, err)
	}
}
