// Package grpctest serves fake gRPC services on loopback for tests: a server whose
// services the test registers, listening before its address is handed out, stopped when
// the test ends (or earlier, by the stop function).
package grpctest

import (
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
)

// Serve starts a gRPC server with the services register adds on a new loopback port. It
// returns the address and a stop function, which the test's cleanup calls too (it is
// idempotent).
func Serve(t testing.TB, register func(*grpc.Server)) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis.Addr().String(), ServeOn(t, lis, register)
}

// ServeOn serves on a listener the test bound itself; see Serve.
func ServeOn(t testing.TB, lis net.Listener, register func(*grpc.Server)) (stop func()) {
	t.Helper()
	srv := grpc.NewServer()
	register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis) // ends with Stop
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}
