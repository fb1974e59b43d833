package client

import (
	"slices"
	"strings"
	"testing"
)

func TestParseAddrs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"localhost:6123"}, []string{"localhost:6123"}},
		{[]string{"127.0.0.1"}, []string{"127.0.0.1:6123"}},
		{[]string{"jm1, jm2:6133 ,,jm1:6123"}, []string{"jm1:6123", "jm2:6133"}},
		{[]string{"a:1", "b:2,a:1"}, []string{"a:1", "b:2"}},
		{[]string{":6123"}, []string{"localhost:6123"}},
		{[]string{"[::1]:7000"}, []string{"[::1]:7000"}},
		{[]string{"::1"}, []string{"[::1]:6123"}},
		{[]string{"[::1]"}, []string{"[::1]:6123"}},
		{[]string{"jm-1.example.com."}, []string{"jm-1.example.com.:6123"}},
		{[]string{"goflink_jm1:6123"}, []string{"goflink_jm1:6123"}},
	} {
		got, err := ParseAddrs(tc.in...)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseAddrs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want string // in the error
	}{
		{"localhost:6123x", `jobmanager address "localhost:6123x": port "6123x": want a number from 1 to 65535`},
		{"localhost:0", `port "0"`},
		{"localhost:70000", `port "70000"`},
		{"localhost:", `port ""`},
		{"a:b:c", `jobmanager address "a:b:c": want host:port: too many colons in address`},
		{"http://localhost:6123", "without a scheme"},
		{"local host:6123", `host "local host"`},
		{"jm1:6123,jm2:x", `jobmanager address "jm2:x"`},
		{" , ", "no jobmanager address given"},
	} {
		if got, err := ParseAddrs(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAddrs(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := New("127.0.0.1:6123x"); err == nil {
		t.Error("New(127.0.0.1:6123x) succeeded, want the address's error")
	}
}
