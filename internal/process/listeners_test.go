package process

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The test binary runs itself as the child: with childKnown set it calls Listeners(known...),
// serves the name of each socket it got to one connection, and prints any error.
const childKnown = "GOFLINK_TEST_LISTENERS_KNOWN"

func TestMain(m *testing.M) {
	if known, ok := os.LookupEnv(childKnown); ok {
		ls, err := Listeners(strings.Split(known, ",")...)
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(0)
		}
		if os.Getenv(listenFDs) != "" {
			os.Stdout.WriteString("error: LISTEN_FDS still set\n")
		}
		os.Stdout.WriteString("ready\n")
		for name, l := range ls {
			c, err := l.Accept()
			if err == nil {
				_, _ = c.Write([]byte(name)) // the parent reads it, or the test fails there
				c.Close()
			}
			l.Close()
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// child starts the test binary as a child that knows the names known and is passed ls, and
// returns its first output line. The parent's listeners are closed once it started.
func child(t *testing.T, known string, ls map[string]net.Listener, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childKnown+"="+known)
	closeCopies, err := PassListeners(cmd, ls)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, env...) // the last value of a variable counts
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	closeCopies()
	for _, l := range ls {
		l.Close() // the child's copy stays open
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // it may have ended already
		_ = cmd.Wait()
	})
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := out.Read(b); err != nil || b[0] == '\n' {
			return cmd, string(line)
		}
		line = append(line, b[0])
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The child serves on the sockets the parent bound: the addresses were taken before it ran.
func TestListenersPassedToAChild(t *testing.T) {
	rpc, raft := listen(t), listen(t)
	addrs := map[string]string{"rpc": rpc.Addr().String(), "raft": raft.Addr().String()}
	if _, line := child(t, "rpc,raft,debug", map[string]net.Listener{"rpc": rpc, "raft": raft}); line != "ready" {
		t.Fatalf("child said %q, want ready", line)
	}
	conns := map[string]net.Conn{} // all dialled before any is read: the child accepts in its order
	for name, addr := range addrs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s socket %s: %v", name, addr, err)
		}
		defer c.Close()
		conns[name] = c
	}
	for name, c := range conns {
		if got, err := io.ReadAll(c); err != nil || string(got) != name {
			t.Errorf("the %s socket at %s served %q, %v; want %q", name, addrs[name], got, err, name)
		}
	}
}

func TestListenersRefused(t *testing.T) {
	for _, tc := range []struct {
		name, known string
		env         []string
		want        string
	}{
		{"unknown name", "rpc,debug", nil, `socket "raft" (fd 3): unknown name, want one of rpc, debug`},
		{"count not matching the names", "rpc,raft", []string{"LISTEN_FDS=40"}, `LISTEN_FDNAMES="raft:rpc" names 2 sockets, LISTEN_FDS=40`},
		{"more sockets than known", "rpc", nil, "LISTEN_FDS=2, but this process takes at most 1 (rpc)"},
		{"another process's", "rpc,raft", []string{"LISTEN_PID=1"}, "ready"},
		{"bad count", "rpc,raft", []string{"LISTEN_FDS=x"}, `LISTEN_FDS="x": want a number of sockets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, line := child(t, tc.known, map[string]net.Listener{"rpc": listen(t), "raft": listen(t)}, tc.env...)
			if !strings.Contains(line, tc.want) {
				t.Errorf("child said %q, want %q", line, tc.want)
			}
		})
	}
}

func TestPassListenersRefusesBadNames(t *testing.T) {
	l := listen(t)
	defer l.Close()
	if _, err := PassListeners(exec.Command("true"), map[string]net.Listener{"a:b": l}); err == nil {
		t.Error("PassListeners accepted the name a:b")
	}
	var buf bytes.Buffer
	cmd := exec.Command("true")
	cmd.ExtraFiles = []*os.File{os.Stdin}
	cmd.Stdout = &buf
	if _, err := PassListeners(cmd, map[string]net.Listener{"rpc": l}); err == nil {
		t.Error("PassListeners accepted a command with other extra files")
	}
}
